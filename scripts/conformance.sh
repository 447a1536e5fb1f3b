#!/usr/bin/env bash
# Runs the conformance kit against one backend, with ONNX's node tests and the backend's
# declared expected failures (tests/conformance/expected-failures/<ID>.txt, if present).
#
#   scripts/conformance.sh                          CpuRef (built in)
#   scripts/conformance.sh ID --plugin FILE         a plugin file, any name
#   scripts/conformance.sh ID --path DIR            a backend discovered in DIR
#
# Extra arguments go to `backplane conformance` (for example --json, --filter TEXT, or
# --expected-failures FILE to use another manifest). Exit status: the kit's (non-zero on an
# undeclared failure).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh

id="${1:-CpuRef}"
shift || true
bash scripts/fetch-onnx-tests.sh >&2
cargo build -p backplane-cli --quiet
manifest=()
if [[ " $* " != *" --expected-failures "* && -f "tests/conformance/expected-failures/$id.txt" ]]; then
  manifest=(--expected-failures "tests/conformance/expected-failures/$id.txt")
fi
exec "$build_dir/debug/backplane" conformance --backend "$id" --onnx-tests target/onnx-tests \
  "${manifest[@]}" "$@"
