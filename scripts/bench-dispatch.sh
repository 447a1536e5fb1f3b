#!/usr/bin/env bash
# Dispatch benchmark: the same networks through the built-in CpuRef and CpuRef loaded as a
# plugin, in one run; host overhead per workload against direct trait calls; memory plan peak.
# Results go into docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
cargo build --release -p backplane-ref-plugin
cargo build --release -p backplane --example bench_dispatch
"$build_dir/release/examples/bench_dispatch" --plugin "$build_dir/release/libbackplane_ref_plugin.so" --rounds "${1:-7}"
