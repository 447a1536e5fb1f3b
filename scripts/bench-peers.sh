#!/usr/bin/env bash
# Peer benchmark (issue 5, issue 14): CpuFast+CpuRef (fused and unfused), CpuRef alone and
# onnxruntime, plus tract-onnx with --tract, at one thread or at --threads N, on the models of
# scripts/bench_models.py: five small ones (small_cnn, mobilenet_v1_block, mobilenet_v2_block,
# conv3x3_64, paddleocr_cls), vad_if (a voice-activity model whose If a value decides, run per
# call through a session, in segments; since 2026-11-29 in the float geometric mean), lstm2 (a
# 2-layer LSTM of hidden size 256 over 100 steps, imported unrolled; likewise) and four real ones staged from scripts/fetch-models.sh's
# target/models (fetched first when missing): resnet50 (ONNX model zoo ResNet-50, 1x3x224x224),
# ppocrv4_det and ppocrv4_rec (PP-OCRv4 text detector at 1x3x320x320 and recogniser at
# 1x3x48x320) and minilm_l6 (the all-MiniLM-L6-v2 sentence encoder at opset 17, int64
# input_ids and attention_mask of 16 tokens), and the int8 models scripts/quantize_models.py makes
# of four of them (QDQ, per channel: resnet50_int8, ppocrv4_det_int8, ppocrv4_rec_int8,
# paddleocr_cls_int8), timed on CpuFast+CpuRef and onnxruntime only, with their own geometric
# mean and CpuFast's int8 speed-up over its float time on the same model. Every output of every
# model is checked against onnxruntime's reference before anything is timed.
#
#   scripts/bench-peers.sh [--tract] [--threads N] [bench_peers options: --rounds N --slice S --only a,b]
#
# The options may come in any order. --threads N (default 1) gives onnxruntime N intra-op
# threads (one inter-op thread, sequential) and CpuFast the backend option Threads=N, which
# wins over ACME_CPUFAST_THREADS (1 here); CpuRef and tract-onnx stay on one thread.
#
# onnxruntime runs in-process through the `ort` crate, which loads libonnxruntime.so from the
# onnxruntime wheel in the project's venv (pinned in scripts/py-venv.sh). --tract builds
# tract-onnx in (about 14 minutes cold on 2 cores). Results: printed, and as JSON in
# target/bench-peers.json (one thread) or target/bench-peers-<N>t.json (N threads), unless
# --json FILE says otherwise.
# docs/PERFORMANCE.md records them with this command. Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

features=()
threads=1
json=
pass=()
while (($#)); do
  case "$1" in
    --tract) features=(--features tract) ;;
    --threads)
      (($# >= 2)) || { echo "bench-peers.sh: --threads needs a value" >&2; exit 2; }
      threads="$2"
      shift
      ;;
    --threads=*) threads="${1#--threads=}" ;;
    --json)
      (($# >= 2)) || { echo "bench-peers.sh: --json needs a file" >&2; exit 2; }
      json="$2"
      shift
      ;;
    --json=*) json="${1#--json=}" ;;
    *) pass+=("$1") ;;
  esac
  shift
done
if ! [[ "$threads" =~ ^[1-9][0-9]*$ ]]; then
  echo "bench-peers.sh: --threads $threads is not a whole number >= 1" >&2
  exit 2
fi
if [[ -z "$json" ]]; then
  if ((threads == 1)); then json=target/bench-peers.json; else json="target/bench-peers-${threads}t.json"; fi
fi

# The PaddleOCR classifier and the pinned venv (numpy, onnx, onnxruntime).
bash scripts/fetch-paddleocr.sh > /dev/null
# ResNet-50, PP-OCRv4 det/rec and MiniLM with their onnxruntime references, each entry
# BENCHMARK-NAME=FOLDER in target/models; scripts/fetch-models.sh makes them all when one is
# missing.
fetched=(resnet50=resnet50 ppocrv4_det=ppocrv4_det ppocrv4_rec=ppocrv4_rec minilm_l6=minilm_l6_opset17
  resnet50_int8=resnet50_qdq ppocrv4_det_int8=ppocrv4_det_qdq ppocrv4_rec_int8=ppocrv4_rec_qdq
  paddleocr_cls_int8=paddleocr_cls_qdq)
for entry in "${fetched[@]}"; do
  if [[ ! -f "target/models/${entry#*=}/info.json" ]]; then
    echo "== target/models/${entry#*=} is missing: scripts/fetch-models.sh"
    bash scripts/fetch-models.sh > /dev/null
    break
  fi
done
source scripts/py-venv.sh > /dev/null
# target/bench-models holds the benchmark models only: the runner times every folder in it.
fetched_args=()
for entry in "${fetched[@]}"; do
  fetched_args+=(--fetched "${entry%%=*}=target/models/${entry#*=}")
done
"$py" scripts/bench_models.py --out-dir target/bench-models \
  --paddleocr target/models/paddleocr_cls/model.onnx "${fetched_args[@]}"

cargo build --release -p acme-cpufast -p backplane-bench-peers "${features[@]}"
release="${CARGO_TARGET_DIR:-$root/target}/release"
ortlib="$(ls "$venv"/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* | head -1)"

# CpuFast's default stays one thread; --threads N reaches it as the per-network backend option
# Threads=N, which wins. OpenMP, should a library use it, gets the same N.
export ACME_CPUFAST_THREADS=1 OMP_NUM_THREADS="$threads"
mkdir -p target
"$release/bench_peers" --models target/bench-models --cpufast "$release/libacme_cpufast.so" \
  --onnxruntime "$ortlib" --threads "$threads" --json "$json" "${pass[@]}"
echo "JSON: $json"
