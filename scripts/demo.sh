#!/usr/bin/env bash
# The main job: build the plugins, install them under their conventional names with
# `backplane install`, point DYNAMIC_BACKEND_PATHS at the directory, show what the host
# discovers, then run a real network across the backends (the example vendor plugin CpuFast
# first, CpuRef for the rest) and show which backend ran each layer, the fusions and the latency;
# then the same model with Acme GpuCl (OpenCL on pocl, device memory) first, with its memory
# boundaries.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

cargo build --release -p backplane-cli -p backplane-ref-plugin -p acme-cpufast -p bp-test-valid-alpha \
  -p bp-test-valid-gamma -p bp-test-id-unknown -p bp-test-version-major-plus
cargo build --release -p backplane --example demo_network
bin="$build_dir/release/backplane"
dir="${BACKPLANE_DEMO_DIR:-$PWD/target/demo-backends}"
rm -rf "$dir" && mkdir -p "$dir" && chmod 755 "$dir"

echo "== install plugins into $dir"
"$bin" install "$build_dir"/release/libbackplane_ref_plugin.so --dir "$dir"
"$bin" install "$build_dir"/release/libacme_cpufast.so --dir "$dir"
"$bin" install "$build_dir"/release/libbp_test_valid_alpha.so --dir "$dir"
"$bin" install "$build_dir"/release/libbp_test_valid_gamma.so --dir "$dir"
# Deliberately broken files, to show the report's verdicts.
cp "$build_dir"/release/libbp_test_id_unknown.so "$dir/Test_Unknown_backend.so"
cp "$build_dir"/release/libbp_test_version_major_plus.so "$dir/Test_MajorPlus_backend.so"
ln -sf nowhere.so "$dir/Test_Dangling_backend.so"
echo "not a plugin" > "$dir/README.txt"

echo; echo "== DYNAMIC_BACKEND_PATHS=$dir backplane backends"
DYNAMIC_BACKEND_PATHS="$dir" "$bin" backends
echo; echo "== the same with built-ins off, as JSON (first lines)"
DYNAMIC_BACKEND_PATHS="$dir" "$bin" backends --no-builtin --json > target/demo-backends.json
head -40 target/demo-backends.json
echo; echo "== backplane inspect $dir/Acme_CpuFast_backend.so"
"$bin" inspect "$dir/Acme_CpuFast_backend.so"
echo; echo "== a residual CNN across the dynamic backends and CpuRef (TestAlpha: Add; TestGamma: ReLU)"
DYNAMIC_BACKEND_PATHS="$dir" "$build_dir/release/examples/demo_network"

echo; echo "== a real third-party model: the PaddleOCR text-direction classifier (ONNX) on CpuFast, then CpuRef"
echo "(built-ins off: CpuRef is the plugin Backplane_CpuRef_backend.so; preferences CpuFast,CpuRef)"
bash scripts/fetch-paddleocr.sh > /dev/null
export RUST_LOG="${RUST_LOG:-error}" # the rejected demo files were reported above
m=target/models/paddleocr_cls
run=(--no-builtin --backends CpuFast,CpuRef --input "x=$m/input.npy")
DYNAMIC_BACKEND_PATHS="$dir" "$bin" run "$m/model.onnx" "${run[@]}" --explain=all > target/demo-paddleocr.txt
echo "where the compute layers run and why (--explain; every layer, constants included, is in"
echo "target/demo-paddleocr.txt from --explain=all), then the output and the run:"
DYNAMIC_BACKEND_PATHS="$dir" "$bin" run "$m/model.onnx" "${run[@]}" --explain
echo "onnxruntime on the same input: $(target/py-venv/bin/python -c "import numpy; print(numpy.load('$m/save_infer_model_scale_0.tmp_1.npy').tolist())")"
echo; echo "== latency: backplane bench, CpuFast+CpuRef against CpuRef alone (release build, one thread)"
DYNAMIC_BACKEND_PATHS="$dir" "$bin" bench "$m/model.onnx" "${run[@]}" --iterations 30
DYNAMIC_BACKEND_PATHS="$dir" "$bin" bench "$m/model.onnx" --no-builtin --backends CpuRef \
  --input "x=$m/input.npy" --iterations 30
echo; echo "== backend options (Backend API 1.1): CpuFast with --backend-option CpuFast:Threads=2"
DYNAMIC_BACKEND_PATHS="$dir" RUST_LOG=info "$bin" bench "$m/model.onnx" "${run[@]}" \
  --backend-option CpuFast:Threads=2 --iterations 30 2>&1 | grep -E "thread\(s\) \(option Threads\)|iterations" | sort -u
echo; echo "== device memory (Backend API 1.3): the same model with Acme GpuCl (OpenCL) first"
echo "(pocl runs OpenCL on the CPU here: scripts/install-opencl.sh; --explain shows each memory boundary)"
bash scripts/install-opencl.sh > /dev/null
cargo build --release --quiet -p acme-gpucl
gpu_dir="$dir-gpu"
rm -rf "$gpu_dir" && mkdir -p "$gpu_dir" && chmod 755 "$gpu_dir"
"$bin" install "$build_dir"/release/libacme_gpucl.so --dir "$gpu_dir" > /dev/null
"$bin" run "$m/model.onnx" --path "$gpu_dir" --path "$dir" --no-builtin \
  --backends GpuCl,CpuFast,CpuRef --input "x=$m/input.npy" --explain
echo; echo "== the time spent at the boundaries: bench --profile"
"$bin" bench "$m/model.onnx" --path "$gpu_dir" --path "$dir" --no-builtin \
  --backends GpuCl,CpuFast,CpuRef --input "x=$m/input.npy" --iterations 10 --profile | head -12
echo; echo "== compiled networks (Backend API 1.4): compile once, then run the .bpn"
echo "(the optimised network, its constants and CpuFast's prepared workloads in one file; no"
echo "importer or optimizer at load; the same output bytes)"
bpn=target/demo-paddleocr.bpn
DYNAMIC_BACKEND_PATHS="$dir" "$bin" compile "$m/model.onnx" "${run[@]}" -o "$bpn"
rm -rf target/demo-out-onnx target/demo-out-bpn
DYNAMIC_BACKEND_PATHS="$dir" "$bin" run "$m/model.onnx" "${run[@]}" --output-dir target/demo-out-onnx > /dev/null
DYNAMIC_BACKEND_PATHS="$dir" "$bin" run "$bpn" --no-builtin --input "x=$m/input.npy" \
  --output-dir target/demo-out-bpn
cmp target/demo-out-onnx/*.npy target/demo-out-bpn/*.npy && echo "the .bpn's output is the .onnx's, byte for byte"
echo "without CpuFast the file is refused, and --reoptimize runs its stored layers on CpuRef:"
env -u DYNAMIC_BACKEND_PATHS "$bin" run "$bpn" --input "x=$m/input.npy" 2>&1 | grep -m1 Error || true
env -u DYNAMIC_BACKEND_PATHS "$bin" run "$bpn" --input "x=$m/input.npy" --reoptimize | tail -1
