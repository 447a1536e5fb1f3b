#!/usr/bin/env bash
# RapidOCR 1.4.4's whole pipeline (PP-OCRv4 detector, PaddleOCR direction classifier, PP-OCRv4
# recogniser) on six rendered images, on backplane through backplane.onnxruntime (RapidOCR's
# CPUExecutionProvider: CpuFast, then CpuRef) against onnxruntime, at 1 and 2 threads, measured
# in one run: the whole pipeline and each model's InferenceSession.run, with the ratios; then
# the detector alone: the first run at a new input shape against a cached run, a cached run
# against a network loaded for that shape only, and the peak RSS with the shape cache full.
# scripts/bench_ocr.py says what each figure is.
#
#   scripts/bench-ocr.sh [bench_ocr.py options: --rounds N (5) --cache-size N (32)
#                         --iterations N (10) --json FILE (default target/bench-ocr.json)]
#
# Release build: CpuFast (cargo) and the Python wheel (maturin --release), installed into the
# project's venv (scripts/py-venv.sh, which pins rapidocr and what it imports) in place of
# whatever backplane wheel was there (scripts/test-python.sh installs its dev build again).
# CpuFast's default is one thread (ACME_CPUFAST_THREADS=1); the 2-thread runs give it
# Threads=2 through RapidOCR's intra_op_num_threads. Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source scripts/toolchain.sh
source scripts/py-venv.sh >/dev/null
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

pass=("$@")
json_given=0
for a in "${pass[@]}"; do [[ "$a" == --json || "$a" == --json=* ]] && json_given=1; done
((json_given)) || pass+=(--json target/bench-ocr.json)

source scripts/release-wheel.sh

export ACME_CPUFAST_THREADS=1
"$py" scripts/bench_ocr.py --plugins "$plugins" "${pass[@]}"
