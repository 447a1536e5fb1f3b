#!/usr/bin/env bash
# Peer benchmark (issue 5): CpuFast+CpuRef (fused and unfused), CpuRef alone and onnxruntime,
# plus tract-onnx with --tract, on the five models of scripts/bench_models.py, at one thread or
# at --threads N. Every output is checked against onnxruntime's reference before anything is
# timed.
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
source scripts/py-venv.sh > /dev/null
"$py" scripts/bench_models.py --out-dir target/bench-models \
  --paddleocr target/models/paddleocr_cls/model.onnx

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
