#!/usr/bin/env bash
# What running a backend out of process costs (--out-of-process, issue 16), measured in one
# run, release build, one thread:
#   - CpuFast+CpuRef on the PaddleOCR classifier and on the small CNN of
#     scripts/bench_models.py, with CpuFast in process and then out of process;
#   - one round trip: a one-Relu model on CpuRef in process and then out of process (one
#     segment, so one round trip, per inference).
# Each figure is the median of ITER timed runs after 20 warm-up runs.
# usage: scripts/bench-oop.sh [ITER]
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
iter="${1:-300}"
source scripts/toolchain.sh
bash scripts/fetch-paddleocr.sh >/dev/null
source scripts/py-venv.sh >/dev/null
models="$root/target/bench-models"
"$py" scripts/bench_models.py --out-dir "$models" >/dev/null
# The one-Relu model (1x64 floats), outside bench-models (whose every folder is a peer model).
relu="$root/target/bench-oop/relu64"
"$py" - "$relu" <<'PY'
import os, sys
import numpy as np
from onnx import TensorProto, helper, save
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
g = helper.make_graph(
    [helper.make_node("Relu", ["x"], ["y"])], "relu64",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), f"{d}/model.onnx")
np.save(f"{d}/input.npy", np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64))
PY
cargo build --release --quiet -p backplane-cli -p acme-cpufast
release="${CARGO_TARGET_DIR:-$root/target}/release"
plugins="$(mktemp -d)"
trap 'rm -rf "$plugins"' EXIT
cp "$release/libacme_cpufast.so" "$plugins/Acme_CpuFast_backend.so"
chmod 755 "$plugins" "$plugins/Acme_CpuFast_backend.so"
export ACME_CPUFAST_THREADS=1 OMP_NUM_THREADS=1
results="$plugins/results.jsonl"
bench() { # label, model dir, extra args...
  local label="$1" dir="$2"
  shift 2
  # To a file first: nothing else starts while it runs.
  "$release/backplane" bench "$dir/model.onnx" --input "x=$dir/input.npy" --iterations "$iter" \
    --warmup 20 --json --path "$plugins" "$@" 2>/dev/null >"$plugins/run.json"
  "$py" -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps({"label": sys.argv[1], "ms": r["median_ms"], "trips": sum(r["out_of_process_round_trips_per_run"].values())}))' "$label" <"$plugins/run.json" >>"$results"
}
for m in paddleocr_cls small_cnn; do
  dir="$models/$m"
  [ "$m" = paddleocr_cls ] && dir="$root/target/models/paddleocr_cls"
  bench "$m in" "$dir" --backends CpuFast,CpuRef
  bench "$m out" "$dir" --backends CpuFast,CpuRef --out-of-process CpuFast
done
bench "relu64 in" "$relu" --backends CpuRef
bench "relu64 out" "$relu" --backends CpuRef --out-of-process CpuRef
"$py" - "$results" <<'PY'
import json, sys
r = {j["label"]: j for j in map(json.loads, open(sys.argv[1]))}
print(f"{'model':<16}{'in process ms':>14}{'out of process ms':>19}{'added':>9}{'round trips':>13}{'per trip us':>13}")
for m in ("paddleocr_cls", "small_cnn", "relu64"):
    a, b = r[f"{m} in"], r[f"{m} out"]
    added = b["ms"] / a["ms"] - 1
    per = (b["ms"] - a["ms"]) * 1e3 / b["trips"] if b["trips"] else float("nan")
    print(f"{m:<16}{a['ms']:>14.3f}{b['ms']:>19.3f}{added:>+9.1%}{b['trips']:>13.1f}{per:>13.1f}")
PY
