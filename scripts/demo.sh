#!/usr/bin/env bash
# The main job: build the plugins, install them under their conventional names with
# `backplane install`, point DYNAMIC_BACKEND_PATHS at the directory, show what the host
# discovers, then run a real network across the backends and show which backend ran each layer.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

cargo build --release -p backplane -p backplane-ref -p bp-test-valid-alpha -p bp-test-valid-gamma \
  -p bp-test-id-unknown -p bp-test-version-major-plus
cargo build --release -p backplane --example demo_network
bin=target/release/backplane
dir="${BACKPLANE_DEMO_DIR:-$PWD/target/demo-backends}"
rm -rf "$dir" && mkdir -p "$dir" && chmod 755 "$dir"

echo "== install plugins into $dir"
"$bin" install target/release/libbackplane_ref.so --dir "$dir"
"$bin" install target/release/libbp_test_valid_alpha.so --dir "$dir"
"$bin" install target/release/libbp_test_valid_gamma.so --dir "$dir"
# Deliberately broken files, to show the report's verdicts.
cp target/release/libbp_test_id_unknown.so "$dir/Test_Unknown_backend.so"
cp target/release/libbp_test_version_major_plus.so "$dir/Test_MajorPlus_backend.so"
ln -sf nowhere.so "$dir/Test_Dangling_backend.so"
echo "not a plugin" > "$dir/README.txt"

echo; echo "== DYNAMIC_BACKEND_PATHS=$dir backplane backends"
DYNAMIC_BACKEND_PATHS="$dir" "$bin" backends
echo; echo "== the same with built-ins off, as JSON (first lines)"
DYNAMIC_BACKEND_PATHS="$dir" "$bin" backends --no-builtin --json > target/demo-backends.json
head -40 target/demo-backends.json
echo; echo "== backplane inspect $dir/Test_TestAlpha_backend.so"
"$bin" inspect "$dir/Test_TestAlpha_backend.so"
echo; echo "== a residual CNN across the dynamic backends and CpuRef (TestAlpha: Add; TestGamma: ReLU)"
DYNAMIC_BACKEND_PATHS="$dir" target/release/examples/demo_network

echo; echo "== a real third-party model: the PaddleOCR text-direction classifier (ONNX) across the same backends"
bash scripts/fetch-paddleocr.sh > /dev/null
m=target/models/paddleocr_cls
DYNAMIC_BACKEND_PATHS="$dir" "$bin" run "$m/model.onnx" --input "x=$m/input.npy" --explain > target/demo-paddleocr.txt
echo "(per-layer assignment, first 30 of $(grep -c ' -> ' target/demo-paddleocr.txt) lines; all in target/demo-paddleocr.txt)"
awk '/ -> / && n++ < 30' target/demo-paddleocr.txt
echo "layers per backend:"
grep ' -> ' target/demo-paddleocr.txt | awk '{for (i = 1; i <= NF; i++) if ($i == "->") print $(i + 1)}' | sort | uniq -c
tail -2 target/demo-paddleocr.txt
echo "onnxruntime on the same input: $(target/py-venv/bin/python -c "import numpy; print(numpy.load('$m/save_infer_model_scale_0.tmp_1.npy').tolist())")"
