#!/usr/bin/env bash
# Peer benchmark (issue 5): CpuFast+CpuRef (fused and unfused), CpuRef alone and onnxruntime,
# plus tract-onnx with --tract, single-threaded, on the five models of scripts/bench_models.py.
# Every output is checked against onnxruntime's reference before anything is timed.
#
#   scripts/bench-peers.sh [--tract] [bench_peers options: --rounds N --slice S --only a,b]
#
# onnxruntime runs in-process through the `ort` crate, which loads libonnxruntime.so from the
# onnxruntime wheel in the project's venv (pinned in scripts/py-venv.sh). --tract builds
# tract-onnx in (about 14 minutes cold on 2 cores). Results: printed, and as JSON in
# target/bench-peers.json. docs/PERFORMANCE.md records them with this command.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

features=()
if [[ "${1:-}" == "--tract" ]]; then
  features=(--features tract)
  shift
fi

# The PaddleOCR classifier and the pinned venv (numpy, onnx, onnxruntime).
bash scripts/fetch-paddleocr.sh > /dev/null
source scripts/py-venv.sh > /dev/null
"$py" scripts/bench_models.py --out-dir target/bench-models \
  --paddleocr target/models/paddleocr_cls/model.onnx

cargo build --release -p acme-cpufast -p backplane-bench-peers "${features[@]}"
ortlib="$(ls "$venv"/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* | head -1)"

# One thread everywhere: CpuFast's own setting; OpenMP, should a library use it.
export ACME_CPUFAST_THREADS=1 OMP_NUM_THREADS=1
target/release/bench_peers --models target/bench-models --cpufast target/release/libacme_cpufast.so \
  --onnxruntime "$ortlib" --json target/bench-peers.json "$@"
