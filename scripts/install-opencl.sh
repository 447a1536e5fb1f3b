#!/usr/bin/env bash
# Installs an OpenCL runtime for GpuCl's tests (plugins-example/acme-gpucl): Debian's pocl
# (a CPU OpenCL device), the ICD loader libOpenCL.so.1 and its development files, when the
# pocl ICD or the loader is missing. Needs root and Debian's package registry; CI runs it
# before the tests. `clinfo -l` then shows one pthread CPU device.
set -euo pipefail

packages=(pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev)
have_loader() { ldconfig -p 2>/dev/null | grep -q 'libOpenCL\.so\.1 '; }

if [ -f /etc/OpenCL/vendors/pocl.icd ] && have_loader; then
  echo "install-opencl: pocl and libOpenCL.so.1 are installed"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-opencl: pocl or libOpenCL.so.1 is missing and installing them needs root:" >&2
  echo "  apt-get install ${packages[*]}" >&2
  exit 1
fi
echo "install-opencl: installing ${packages[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "${packages[@]}" >/dev/null ||
  { apt-get update -qq && apt-get install -y -qq "${packages[@]}" >/dev/null; }
have_loader || { echo "install-opencl: libOpenCL.so.1 still missing after the install" >&2; exit 1; }
echo "install-opencl: done"
