#!/usr/bin/env bash
# The real-model check (README, scripts/test.sh): builds the release CLI, CpuRef's plugin and
# CpuFast, then runs every model in target/models (scripts/fetch-models.sh,
# scripts/fetch-paddleocr.sh, and the int8 models of scripts/quantize_models.py) with CpuRef
# built in, CpuRef as a plugin, and CpuFast+CpuRef (and three of them with GpuCl, the OpenCL
# backend, first: scripts/install-opencl.sh installs pocl), against onnxruntime's outputs
# (scripts/check_models.py). Release, because the zoo models take seconds each on CpuRef there
# and minutes in a debug build. Without MODEL arguments it then runs every setting of
# onnxruntime's quantizer on two models against onnxruntime (scripts/check_quant_settings.py).
# usage: scripts/check-models.sh [MODEL ...]
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source scripts/toolchain.sh
source scripts/py-venv.sh >/dev/null
bash scripts/install-opencl.sh
cargo build --release --quiet -p backplane-cli -p backplane-ref-plugin -p acme-cpufast -p acme-gpucl
target_dir="${CARGO_TARGET_DIR:-$root/target}/release"
only=()
[ "$#" -gt 0 ] && only=(--only "$@")
echo "== models against onnxruntime (rtol 1e-3, atol 1e-4; the int8 models: their info.json's tolerances)"
"$py" scripts/check_models.py --cli "$target_dir/backplane" \
  --cpuref-plugin "$target_dir/libbackplane_ref_plugin.so" \
  --cpufast-plugin "$target_dir/libacme_cpufast.so" \
  --gpucl-plugin "$target_dir/libacme_gpucl.so" ${only[@]+"${only[@]}"}
if [ "${#only[@]}" -eq 0 ]; then
  echo "== every setting of onnxruntime's quantizer against onnxruntime (one quantization step)"
  "$py" scripts/check_quant_settings.py --cli "$target_dir/backplane" \
    --cpufast-plugin "$target_dir/libacme_cpufast.so"
fi
