#!/usr/bin/env bash
# The real apps of bindings/python/tests/apps.py, whole-app time on backplane (through
# backplane.onnxruntime: CpuFast, then CpuRef) against onnxruntime, measured in one run;
# scripts/bench_apps.py says what each figure is.
#
#   scripts/bench-apps.sh [bench_apps.py options: --rounds N (3) --apps A,B
#                          --json FILE (default target/bench-apps.json)]
#
# Release build: CpuFast (cargo) and the Python wheel (maturin --release), installed into the
# project's venv in place of whatever backplane wheel was there (scripts/test-python.sh
# installs its dev build again). Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source scripts/toolchain.sh
source scripts/py-venv.sh >/dev/null
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

source scripts/release-wheel.sh

"$py" scripts/bench_apps.py --plugins "$plugins" "$@"
