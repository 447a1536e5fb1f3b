#!/usr/bin/env bash
# all-MiniLM-L6-v2 (scripts/fetch-models.sh) in one run: backplane's CpuRef alone, CpuFast +
# CpuRef (1 and 2 threads), and onnxruntime (1 and 2 intra-op threads), each the median of
# ITER timed runs after warm-up, then the ratios to onnxruntime. Release build.
# usage: scripts/bench-encoder.sh [ITER] [opset13|opset17]
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
iter="${1:-50}"
model_dir="$root/target/models/minilm_l6_${2:-opset17}"
source scripts/toolchain.sh
source scripts/py-venv.sh >/dev/null
[ -f "$model_dir/model.onnx" ] || bash scripts/fetch-models.sh >/dev/null
cargo build --release --quiet -p backplane-cli -p acme-cpufast
release="${CARGO_TARGET_DIR:-$root/target}/release"
plugins="$(mktemp -d)"
trap 'rm -rf "$plugins"' EXIT
cp "$release/libacme_cpufast.so" "$plugins/Acme_CpuFast_backend.so"
chmod 755 "$plugins" "$plugins/Acme_CpuFast_backend.so"
inputs=(--input "input_ids=$model_dir/input_ids.npy" --input "attention_mask=$model_dir/attention_mask.npy")
bench() { # label, extra args...
  local label="$1"
  shift
  "$release/backplane" bench "$model_dir/model.onnx" "${inputs[@]}" --iterations "$iter" \
    --warmup 5 --json "$@" 2>/dev/null |
    "$py" -c 'import json,sys; print(sys.argv[1], json.load(sys.stdin)["median_ms"])' "$label"
}
results="$plugins/results.txt"
{
  bench cpuref --backends CpuRef
  bench cpufast_1 --path "$plugins" --backends CpuFast,CpuRef
  bench cpufast_2 --path "$plugins" --backends CpuFast,CpuRef --backend-option CpuFast:Threads=2
  "$py" - "$model_dir" "$iter" <<'PY'
import statistics, sys, time
import numpy as np, onnxruntime as ort
d, n = sys.argv[1], int(sys.argv[2])
feeds = {k: np.load(f"{d}/{k}.npy") for k in ("input_ids", "attention_mask")}
for threads in (1, 2):
    o = ort.SessionOptions()
    o.intra_op_num_threads, o.inter_op_num_threads = threads, 1
    s = ort.InferenceSession(f"{d}/model.onnx", o, providers=["CPUExecutionProvider"])
    for _ in range(5):
        s.run(None, feeds)
    t = []
    for _ in range(n):
        a = time.perf_counter(); s.run(None, feeds); t.append((time.perf_counter() - a) * 1e3)
    print(f"onnxruntime_{threads}", statistics.median(t))
PY
} >"$results"
"$py" - "$results" <<'PY'
import sys
ms = {k: float(v) for k, v in (l.split() for l in open(sys.argv[1]))}
print(f"{'runtime':<14} {'median ms':>10} {'x onnxruntime (same threads)':>30}")
for k, v in ms.items():
    threads = "2" if k.endswith("_2") else "1"
    print(f"{k:<14} {v:>10.2f} {v / ms['onnxruntime_' + threads]:>29.2f}x")
PY
