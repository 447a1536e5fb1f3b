#!/usr/bin/env bash
# Start-up of compiled networks (issue 30): process start to first output, `backplane run
# MODEL.onnx` against `backplane run MODEL.bpn` (made by `backplane compile`), for the
# PaddleOCR classifier, PP-OCRv4's detector, ResNet-50 and MiniLM on CpuFast + CpuRef; file
# sizes, peak resident memory, constant bytes copied at load, bit-identical outputs.
# Results go to docs/PERFORMANCE.md ("Compiled networks") by hand, with this command.
# Usage: scripts/bench-startup.sh [RUNS] [MODEL...]   (default 7 runs of each, all four models)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh
source scripts/py-venv.sh >/dev/null
runs="${1:-7}"
shift || true
bash scripts/fetch-paddleocr.sh >/dev/null
bash scripts/fetch-models.sh >/dev/null
cargo build --release --quiet -p backplane-cli -p acme-cpufast
release="${CARGO_TARGET_DIR:-$PWD/target}/release"
plugins=$(mktemp -d)
trap 'rm -rf "$plugins"' EXIT
chmod 755 "$plugins"
cp "$release/libacme_cpufast.so" "$plugins/Acme_CpuFast_backend.so"
only=()
[ "$#" -gt 0 ] && only=(--only "$@")
"$py" scripts/bench_startup.py --cli "$release/backplane" --plugins "$plugins" --runs "$runs" \
  ${only[@]+"${only[@]}"}
