#!/usr/bin/env bash
# Builds backplane for aarch64 (64-bit Arm Linux) on an x86-64 machine (issue 41): the host
# (library and CLI), CpuRef, CpuFast, GpuCl, the C library and every test plugin of
# tests/plugins, plus the plugin of the frozen Backend API 1.0 (tests/compat), into
# $CARGO_TARGET_DIR/aarch64 (or target/aarch64). rustup cannot add targets on this machine, so
# the compiler is Debian's (rustc-web/cargo-web, /usr/bin/rustc, 1.95 or later) with Debian's
# arm64 standard library (libstd-rust-web-dev:arm64), linked by gcc-aarch64-linux-gnu;
# qemu-user runs the results (scripts/test-aarch64.sh) with the arm64 C library of libc6:arm64
# (`qemu-aarch64 -L /`: the cross toolchain's own copy in /usr/aarch64-linux-gnu is an older
# build whose loader and libc disagree with the arm64 package's, and threads hang there). Installs what is missing (needs root
# and Debian's package registry). The Python wheel is not built for aarch64.
# Usage: scripts/build-aarch64.sh [--release]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${CARGO_TARGET_DIR:-$PWD/target}"
out="$build_dir/aarch64"
triple=aarch64-unknown-linux-gnu
profile=()
mode=debug
if [ "${1:-}" = --release ]; then
  profile=(--release)
  mode=release
fi

# Debian's compiler must be new enough for the workspace (its rust-version) and its arm64
# standard library of the same version.
want=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
version_of() { "$@" 2>/dev/null | sed -n 's/^rustc \([0-9.]*\).*/\1/p'; }
new_enough() { [ -n "$1" ] && [ "$(printf '%s\n%s\n' "$want" "$1" | sort -V | head -1)" = "$want" ]; }
have=$(version_of /usr/bin/rustc --version)
if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1 ||
  [ ! -d "/usr/lib/rustlib/$triple" ] || [ ! -e /lib/ld-linux-aarch64.so.1 ] || ! new_enough "$have"; then
  if [ "$(id -u)" != 0 ]; then
    echo "build-aarch64: the cross compiler, Debian's Rust $want+ for arm64 or qemu-user is missing, and installing them needs root" >&2
    exit 1
  fi
  echo "build-aarch64: installing gcc-aarch64-linux-gnu, rustc-web, cargo-web, libstd-rust-web-dev:arm64, qemu-user" >&2
  export DEBIAN_FRONTEND=noninteractive
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  apt-get update -qq
  apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross rustc-web cargo-web \
    libstd-rust-web-dev:arm64 libc6:arm64 qemu-user >/dev/null
  have=$(version_of /usr/bin/rustc --version)
fi
if ! new_enough "$have"; then
  echo "build-aarch64: Debian's rustc is $have; the workspace needs $want or later" >&2
  exit 1
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /"
export RUSTC=/usr/bin/rustc
echo "build-aarch64: $(/usr/bin/rustc --version) for $triple into $out" >&2
# Everything of the workspace but the Python bindings (a wheel per platform is not asked for)
# and the peers' benchmark (onnxruntime and tract for x86-64 only).
/usr/bin/cargo build --target "$triple" --target-dir "$out" ${profile[@]+"${profile[@]}"} \
  --workspace --exclude backplane-python --exclude backplane-bench-peers
# The plugin of the frozen Backend API 1.0, as tests/compat builds it for x86-64.
/usr/bin/cargo build --target "$triple" --target-dir "$out/compat" ${profile[@]+"${profile[@]}"} \
  --manifest-path tests/compat/Cargo.toml
echo "build-aarch64: done: $out/$triple/$mode and $out/compat/$triple/$mode" >&2
