#!/usr/bin/env bash
# The test command (README, CI): formatting, the PaddleOCR model and its onnxruntime
# reference (scripts/fetch-paddleocr.sh), ONNX's node tests (scripts/fetch-onnx-tests.sh),
# the compatibility plugins built by Debian's rustc (scripts/compat.sh: the frozen Backend
# API 1.0 plugins, a 1.1, a 1.2 and a 1.3 plugin, installing rustc-web/cargo-web when missing),
# the whole workspace build (the CLI, CpuRef's cdylib, every test plugin under tests/plugins,
# which the tests dlopen, and the C and Python bindings), clippy with -D warnings, rustdoc
# without warnings, then every test (cargo's, then the Python package's with pytest:
# scripts/test-python.sh, then the real models against onnxruntime: scripts/fetch-models.sh
# and scripts/check-models.sh, then the aarch64 build under qemu: scripts/test-aarch64.sh),
# ending with one line that totals them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# One clean build: incremental state would only add gigabytes of disk (set CARGO_INCREMENTAL=1
# to keep it between runs of this script).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The key that seals compiled networks' prepared workloads: the tests' own, in target/, so
# that testing never makes one in the user's configuration folder.
export BACKPLANE_SEAL_KEY="${BACKPLANE_SEAL_KEY:-$PWD/target/test-seal.key}"

cargo fmt --all -- --check
# A real third-party model and its onnxruntime reference output (pinned packages, local venv).
bash scripts/fetch-paddleocr.sh
# ONNX's node tests for the conformance kit (onnx 1.22.0 wheel, cached in target/onnx-tests).
bash scripts/fetch-onnx-tests.sh
# The zoo's light/ models from the same wheel, with onnxruntime reference outputs.
bash scripts/fetch-models.sh
# Plugins of the frozen Backend APIs 1.0, 1.1, 1.2 and 1.3 built by another compiler (tests/compat.rs).
bash scripts/compat.sh
# An OpenCL platform on the CPU (pocl) for GpuCl, the device-memory example backend.
bash scripts/install-opencl.sh
# The C API's tests compile against the installed library with pkg-config and run under
# valgrind (tests/integration/tests/c_api.rs).
missing=()
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${missing[@]}" >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }
fi
cargo build --workspace --all-targets
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
log=target/test-output.log
status=0
cargo test --workspace --no-fail-fast 2>&1 | tee "$log" || status=$?
# The Python package (bindings/python): wheel built by maturin, tests by pytest.
bash scripts/test-python.sh 2>&1 | tee -a "$log" || status=$?
# Every model of target/models on three configurations against onnxruntime (release build).
bash scripts/check-models.sh 2>&1 | tee -a "$log" || status=$?
# The aarch64 build (Debian's Rust and arm64 standard library) and its tests under qemu.
bash scripts/test-aarch64.sh 2>&1 | tee -a "$log" || status=$?
# cargo prints one `test result:` line per test binary (its last is a doc-test summary that
# often reads `0 passed`), pytest and the model check one summary line each: one total instead.
awk '/^test result:/ {
       for (i = 1; i <= NF; i++) {
         if ($(i) ~ /^passed;?$/) p += $(i - 1)
         if ($(i) ~ /^failed;?$/) f += $(i - 1)
         if ($(i) ~ /^ignored;?$/) s += $(i - 1)
       }
     }
     /^[0-9]+ (passed|failed|skipped|errors?|deselected).* in [0-9.]+s/ {
       for (i = 1; i <= NF; i++) {
         w = $(i); sub(/,$/, "", w)
         if (w == "passed") p += $(i - 1)
         if (w == "failed" || w == "error" || w == "errors") f += $(i - 1)
         if (w == "skipped" || w == "declared") s += $(i - 1)
       }
     }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
