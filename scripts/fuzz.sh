#!/usr/bin/env bash
# Fuzzes the ONNX importer with cargo-fuzz (libFuzzer). Needs a nightly toolchain (rustup's
# `nightly`, which cannot be downloaded on a machine without it) and installs cargo-fuzz from
# crates.io if missing. Seeds: the PaddleOCR model when scripts/fetch-paddleocr.sh has run.
# Usage: scripts/fuzz.sh [SECONDS]   (default 600). Not part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
mkdir -p target/fuzz-corpus/onnx_import
model=target/models/paddleocr_cls/model.onnx
[ -f "$model" ] && cp "$model" target/fuzz-corpus/onnx_import/paddleocr_cls.onnx
cd fuzz
cargo +nightly fuzz run onnx_import ../target/fuzz-corpus/onnx_import -- \
  -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=1048576 -print_final_stats=1
