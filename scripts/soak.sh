#!/usr/bin/env bash
# Soak (not part of scripts/test.sh; about 5 minutes on 2 cores, valgrind included):
#  1. 1,000 cycles of: create a runtime whose backends are all plugins (CpuFast and CpuRef,
#     release builds), load the PaddleOCR model, run 10 inferences, unload, drop. After 100
#     warm-up cycles resident memory must grow by under 1 MiB and open descriptors not at all
#     (host/examples/soak.rs checks and prints the figures).
#  2. The same with fewer cycles under valgrind memcheck: no invalid read or write, no
#     definite or possible leak (scripts/valgrind.supp names what is deliberately kept: see
#     docs/RELIABILITY.md). Needs valgrind (`apt-get install valgrind`); skipped with a
#     message if it is missing, or with --no-valgrind.
# Usage: scripts/soak.sh [--cycles N] [--warmup N] [--valgrind-cycles N] [--no-valgrind]
# (the warm-up is 100 cycles, or half of --cycles when that is 200 or fewer)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
cycles=1000
warmup=""
vg_cycles=4
valgrind=yes
while [ $# -gt 0 ]; do
  case "$1" in
    --cycles) cycles="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --valgrind-cycles) vg_cycles="$2"; shift 2 ;;
    --no-valgrind) valgrind=no; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

if [ -z "$warmup" ]; then
  warmup=100
  if [ "$cycles" -le 200 ]; then warmup=$((cycles / 2)); fi
fi
if [ "$warmup" -lt 1 ] || [ "$warmup" -ge "$cycles" ]; then
  echo "--warmup must be at least 1 and below --cycles ($cycles)" >&2
  exit 2
fi

bash scripts/fetch-paddleocr.sh
model=target/models/paddleocr_cls/model.onnx
input="x=target/models/paddleocr_cls/input.npy"
cargo build --release -p backplane-ref-plugin -p acme-cpufast
cargo build --release -p backplane --example soak
plugins="$PWD/target/soak/plugins"
rm -rf "$plugins"
mkdir -p "$plugins"
chmod 755 target/soak "$plugins"
install -m 755 "$build_dir"/release/libacme_cpufast.so "$plugins/Acme_CpuFast_backend.so"
install -m 755 "$build_dir"/release/libbackplane_ref_plugin.so "$plugins/Backplane_CpuRef_backend.so"
# One thread per CpuFast workload: the figures do not depend on a thread pool's warm-up.
export ACME_CPUFAST_THREADS=1

echo "== soak: $cycles cycles"
"$build_dir/release/examples/soak" --plugins "$plugins" --model "$model" --input "$input" --cycles "$cycles" \
  --warmup "$warmup" --inferences 10

if [ "$valgrind" = no ]; then exit 0; fi
if ! command -v valgrind >/dev/null 2>&1; then
  echo "== valgrind not installed: memcheck run skipped (apt-get install valgrind)"
  exit 0
fi
echo "== valgrind memcheck: $vg_cycles cycles"
valgrind --tool=memcheck --error-exitcode=1 --leak-check=full \
  --show-leak-kinds=definite,possible --errors-for-leak-kinds=definite,possible \
  --suppressions=scripts/valgrind.supp --num-callers=30 \
  "$build_dir/release/examples/soak" --plugins "$plugins" --model "$model" --input "$input" --cycles "$vg_cycles" \
  --warmup 1 --every 1 --inferences 2 --max-growth-kib 1000000000
