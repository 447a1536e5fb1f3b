# Sourced by the fetch scripts: makes (or reuses) the project's Python venv at target/py-venv
# with pinned packages, and sets `py` to its interpreter. Uses `root` (the repository) when
# the sourcing script set it, else the repository this file is in (an unset `root` once made
# /target/py-venv at the filesystem root).
# Environment: PYTHON (default python3) makes the venv.
root="${root:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
venv="$root/target/py-venv"

# Exact versions, including the dependencies of onnx and onnxruntime, checked to install
# on CPython 3.11 / x86_64 Linux.
requirements=(
  numpy==2.4.6
  onnx==1.23.2
  onnxruntime==1.31.1
  protobuf==7.36.2
  ml_dtypes==0.6.0
  typing_extensions==4.16.0
  flatbuffers==25.12.19
  packaging==26.3
  # The Python binding's build backend and test runner (scripts/test-python.sh).
  maturin==1.16.0
  pytest==8.4.2
)
# RapidOCR 1.4.4 (its model files, and its pipeline for the onnxruntime shim's end-to-end
# test and scripts/bench-ocr.sh) and the modules its code imports, each pinned by version and
# sha256, installed without dependencies (numpy is pinned above).
ocr_requirements="$root/scripts/rapidocr-requirements.txt"
# Four more real onnxruntime apps that ship their models (bindings/python/tests/test_apps.py),
# pinned by sha256 and installed without dependencies (what they import is pinned above).
apps_requirements="$root/scripts/apps-requirements.txt"

echo "== Python venv: $venv"
if [[ ! -x "$venv/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$venv"
else
  echo "reusing the existing venv"
fi
py="$venv/bin/python"
stamp="$venv/.fetch-paddleocr-requirements"
wanted="$(printf '%s\n' "${requirements[@]}"; cat "$ocr_requirements" "$apps_requirements")"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
  echo "pinned packages already installed"
else
  "$py" -m pip install --disable-pip-version-check --quiet "${requirements[@]}"
  # --ignore-requires-python: rapidocr's wheel says <3.13; the venv is made for 3.11.
  "$py" -m pip install --disable-pip-version-check --quiet --no-deps --require-hashes \
    --ignore-requires-python -r "$ocr_requirements"
  "$py" -m pip install --disable-pip-version-check --quiet --no-deps --require-hashes \
    --ignore-requires-python -r "$apps_requirements"
  printf '%s\n' "$wanted" >"$stamp"
fi
"$py" -m pip list --disable-pip-version-check 2>/dev/null |
  grep -Ei '^(numpy|onnx|onnxruntime|rapidocr-onnxruntime|protobuf|opencv-python-headless|rapid[-_]orientation|nudenet|ddddocr|magika) ' |
  sed 's/^/  /'
