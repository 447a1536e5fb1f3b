#!/usr/bin/env bash
# Fetches the PaddleOCR text-direction classifier (ch_ppocr_mobile_v2.0_cls_infer.onnx,
# Apache-2.0, ~586 KB) from the rapidocr-onnxruntime wheel on PyPI and makes reference data
# for it with onnxruntime:
#
#   target/py-venv/                      Python venv with pinned onnx, onnxruntime, numpy
#   target/models/paddleocr_cls/model.onnx
#   target/models/paddleocr_cls/input.npy          seeded float32 input
#   target/models/paddleocr_cls/<output>.npy       onnxruntime's outputs (sanitised names)
#   target/models/paddleocr_cls/info.json          names, shapes, opset, op counts, versions
#
# Runs from any directory; safe to run again (the venv is reused, the model is copied only
# if it changed, the reference data is rewritten identically). Nothing here is committed.
# Environment: PYTHON (default python3) makes the venv (scripts/py-venv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

out="$root/target/models/paddleocr_cls"
model_in_wheel="rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
# sha256 of that file in rapidocr-onnxruntime 1.4.4 (from the wheel's RECORD).
model_sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"

source "$root/scripts/py-venv.sh"

echo "== model: $out/model.onnx"
mkdir -p "$out"
src="$("$py" - "$model_in_wheel" <<'PY'
import importlib.metadata, sys
dist = importlib.metadata.distribution("rapidocr-onnxruntime")
print(dist.locate_file(sys.argv[1]))
PY
)"
[[ -f "$src" ]] || { echo "error: $model_in_wheel not found in the installed wheel ($src)" >&2; exit 1; }
got="$(sha256sum "$src" | cut -d' ' -f1)"
if [[ "$got" != "$model_sha256" ]]; then
  echo "error: $src has sha256 $got, expected $model_sha256" >&2
  exit 1
fi
if cmp -s "$src" "$out/model.onnx"; then
  echo "up to date (from $src)"
else
  cp "$src" "$out/model.onnx.tmp" && mv "$out/model.onnx.tmp" "$out/model.onnx"
  echo "copied from $src"
fi
echo "sha256 $model_sha256, $(stat -c %s "$out/model.onnx") bytes"

echo "== reference data: $out"
"$py" "$root/scripts/model_reference.py" --model "$out/model.onnx" --out-dir "$out" \
  --description "ch_ppocr_mobile_v2.0_cls_infer.onnx (PaddleOCR text direction classifier, Apache-2.0, from the rapidocr-onnxruntime wheel)"
echo
echo "done: model, input.npy, outputs and info.json are in $out"
