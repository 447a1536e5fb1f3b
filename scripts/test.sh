#!/usr/bin/env bash
# The test command (README, CI): formatting, the PaddleOCR model and its onnxruntime
# reference (scripts/fetch-paddleocr.sh), ONNX's node tests (scripts/fetch-onnx-tests.sh),
# the whole workspace build (the CLI, CpuRef's cdylib and every test plugin under
# tests/plugins, which the tests dlopen), clippy with -D warnings, rustdoc without warnings,
# then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

cargo fmt --all -- --check
# A real third-party model and its onnxruntime reference output (pinned packages, local venv).
bash scripts/fetch-paddleocr.sh
# ONNX's node tests for the conformance kit (onnx 1.22.0 wheel, cached in target/onnx-tests).
bash scripts/fetch-onnx-tests.sh
cargo build --workspace --all-targets
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
cargo test --workspace
