#!/usr/bin/env bash
# Memory-boundary benchmark (Backend API 1.3's device tensors): per tensor size, the copies and
# imports per run of `x -> ReLU -> y` with the ReLU on a device backend (TestDevice, whose
# "device" is memory of its own, and GpuCl on the installed OpenCL platform: pocl on a machine
# without GPU), each boundary's mean time, and the run against CpuRef alone. Results go into
# docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
bash scripts/install-opencl.sh > /dev/null
cargo build --release --quiet -p bp-test-device-memory -p acme-gpucl
cargo build --release --quiet -p backplane --example bench_transfers
clinfo -l 2>/dev/null | sed 's/^/opencl: /' || true
"$build_dir/release/examples/bench_transfers" \
  --plugin "TestDevice=$build_dir/release/libbp_test_device_memory.so" \
  --plugin "GpuCl=$build_dir/release/libacme_gpucl.so" --runs "${1:-200}"
