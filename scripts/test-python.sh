#!/usr/bin/env bash
# The Python package's tests (README, scripts/test.sh): builds the wheel of bindings/python
# with maturin (dev profile, the workspace's target dir), installs it into the project's venv
# (scripts/py-venv.sh: pinned numpy, onnx, onnxruntime, maturin, pytest), and runs pytest.
# Needs the workspace built first (the tests load target/debug's plugins) and the PaddleOCR
# model (scripts/fetch-paddleocr.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/toolchain.sh
source scripts/py-venv.sh

rm -rf target/wheels
"$venv/bin/maturin" build --quiet -m bindings/python/Cargo.toml --profile dev -o target/wheels
wheel=$(ls target/wheels/backplane-*.whl)
"$py" -m pip install --disable-pip-version-check --quiet --force-reinstall --no-deps "$wheel"
echo "== pytest: bindings/python/tests ($(basename "$wheel"))"
cd bindings/python
BACKPLANE_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}/debug" "$py" -m pytest -q -p no:cacheprovider tests
