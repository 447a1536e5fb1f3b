#!/usr/bin/env bash
# Fetches ONNX's backend node tests for the conformance kit (`backplane conformance
# --onnx-tests target/onnx-tests`):
#
#   target/onnx-tests/node/<test>/               from the onnx==1.22.0 wheel
#                                                (onnx/backend/test/data/node/; later wheels
#                                                no longer ship them), unchanged
#   target/onnx-tests/pytorch-converted/<test>/  from the same wheel's pytorch-converted/,
#                                                models upgraded to opset 13 with
#                                                onnx.version_converter (onnx 1.23.2)
#   target/onnx-tests/pytorch-operator/<test>/   likewise from pytorch-operator/
#   target/onnx-tests/SOURCE.json                wheel, digests, counts, conversion results
#   target/onnx-tests/onnxruntime.json           onnxruntime's results on the same tests
#                                                (scripts/onnx_tests_onnxruntime.py), which
#                                                `backplane conformance` prints beside its own
#
# Each test directory holds model.onnx and test_data_set_N/{input,output}_K.pb (TensorProto).
# The wheel is downloaded (not installed) with pip into target/onnx-tests/wheel/ and checked
# against its sha256; the conversion runs in the project venv (scripts/py-venv.sh). Safe to
# run again: an existing, complete extraction of the same wheel is reused. Nothing here is
# committed (the data is ~60 MB, Apache-2.0, from https://github.com/onnx/onnx).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

out="$root/target/onnx-tests"
# One exact file: the data is the same in every platform's wheel.
wheel="onnx-1.22.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
wheel_sha256="1d0a2bdb15eb2b3cb65c438f3423d9620d14fdce32f92380e6bb1b2e09568ef5"

source "$root/scripts/py-venv.sh"

echo "== onnx 1.22.0 wheel: $out/wheel/$wheel"
mkdir -p "$out/wheel"
if [[ ! -f "$out/wheel/$wheel" ]]; then
  "$py" -m pip download --disable-pip-version-check --quiet --no-deps \
    --only-binary=:all: --platform manylinux_2_28_x86_64 --python-version 3.11 \
    --implementation cp --dest "$out/wheel" onnx==1.22.0
fi
got="$(sha256sum "$out/wheel/$wheel" | cut -d' ' -f1)"
if [[ "$got" != "$wheel_sha256" ]]; then
  echo "error: $wheel has sha256 $got, expected $wheel_sha256" >&2
  exit 1
fi
echo "sha256 $wheel_sha256"

echo "== tests: $out"
"$py" "$root/scripts/onnx_tests_prepare.py" --wheel "$out/wheel/$wheel" \
  --wheel-sha256 "$wheel_sha256" --out-dir "$out" --opset 13

echo "== onnxruntime on the same tests: $out/onnxruntime.json"
"$py" "$root/scripts/onnx_tests_onnxruntime.py" --dir "$out"
