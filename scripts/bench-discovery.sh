#!/usr/bin/env bash
# Discovery benchmark: Runtime::new over 64 valid plugins + 10,000 non-matching files, against
# a minimal C program doing readdir + dlopen(RTLD_NOW) + 3 x dlsym on the same files, in one
# run (alternating fresh processes), and the cost of --isolate (each plugin probed in a child
# process first) per plugin. Then the whole process, `backplane backends --json` against the
# C program's process (interleaved, medians), with the ratios against their targets (issue
# 26: <= 1.5x among 10,000 other files, <= 1.3x with the plugins alone). Results go into
# docs/PERFORMANCE.md.
#
# Usage: scripts/bench-discovery.sh [ROUNDS] [--whole-process-only]   (ROUNDS >= 11; 15 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
rounds="${1:-15}"
shift || true
if [ "$rounds" -lt 11 ]; then
  echo "bench-discovery: at least 11 rounds (got $rounds)" >&2
  exit 2
fi
target_dir="${CARGO_TARGET_DIR:-target}"

cargo build --release -p bp-test-bench-plugin
# The binary on its own, as `cargo build --release` makes it: built together with an example,
# the dev-dependencies' features join in (regex's Unicode tables: +185 KB of data to relocate
# at every start, +8,600 relocations), and the measured start-up is not the shipped one's.
cargo build --release -p backplane-cli --bin backplane
cargo build --release -p backplane --example bench_discovery
mkdir -p "$target_dir/bench-discovery"
gcc -O2 -o "$target_dir/bench-discovery/baseline_dlopen" scripts/bench/baseline_dlopen.c -ldl
"$target_dir/release/examples/bench_discovery" \
  --plugin "$target_dir/release/libbp_test_bench_plugin.so" \
  --baseline "$target_dir/bench-discovery/baseline_dlopen" \
  --probe "$target_dir/release/backplane" \
  --rounds "$rounds" --work "$target_dir/bench-discovery" "$@"
