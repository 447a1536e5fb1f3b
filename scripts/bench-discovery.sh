#!/usr/bin/env bash
# Discovery benchmark: Runtime::new over 64 valid plugins + 10,000 non-matching files, against
# a minimal C program doing readdir + dlopen(RTLD_NOW) + 3 x dlsym on the same files, in one
# run (alternating fresh processes), and the cost of --isolate (each plugin probed in a child
# process first) per plugin. Results go into docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/toolchain.sh
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
rounds="${1:-15}"

cargo build --release -p bp-test-bench-plugin
cargo build --release -p backplane --example bench_discovery --bin backplane
mkdir -p target/bench-discovery
gcc -O2 -o target/bench-discovery/baseline_dlopen scripts/bench/baseline_dlopen.c -ldl
target/release/examples/bench_discovery \
  --plugin target/release/libbp_test_bench_plugin.so \
  --baseline target/bench-discovery/baseline_dlopen \
  --probe target/release/backplane \
  --rounds "$rounds" --work target/bench-discovery
