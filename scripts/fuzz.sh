#!/usr/bin/env bash
# Fuzzes with cargo-fuzz (libFuzzer). Targets (fuzz/fuzz_targets): onnx_import, path_list,
# file_name, npy_reader, substitution, compiled_network, cpufast_workloads. Needs rustup's `nightly` toolchain (a
# fresh machine may lack it: `rustup toolchain install nightly` needs the network) and installs
# cargo-fuzz from crates.io if missing. Not part of scripts/test.sh.
# Usage: scripts/fuzz.sh [TARGET|all] [SECONDS]   (default: all, 600 s each, one after another)
# Each run's last lines (run count, coverage) go to target/fuzz-logs/<target>.log; a crash
# leaves its input in fuzz/artifacts/<target>/ and makes the script fail.
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-all}"
seconds="${2:-600}"
all=(onnx_import path_list file_name npy_reader substitution compiled_network cpufast_workloads)
if [ "$which" = all ]; then
  targets=("${all[@]}")
elif [[ " ${all[*]} " == *" $which "* ]]; then
  targets=("$which")
else
  echo "usage: scripts/fuzz.sh [TARGET|all] [SECONDS]; targets: ${all[*]}" >&2
  exit 2
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
corpus=target/fuzz-corpus
mkdir -p target/fuzz-logs
for t in "${all[@]}"; do mkdir -p "$corpus/$t"; done

# Seeds: real inputs where the repository has them.
model=target/models/paddleocr_cls/model.onnx
[ -f "$model" ] && cp "$model" "$corpus/onnx_import/paddleocr_cls.onnx"
for f in target/models/paddleocr_cls/*.npy; do [ -f "$f" ] && cp "$f" "$corpus/npy_reader/"; done
# Compiled networks: a small one kept in the repository (host/src/compiled's
# `the_fuzz_seed_reads` checks that it still reads, and writes it again), and PaddleOCR's
# classifier compiled by the release binary, on CpuRef and with the CpuFast example plugin's
# prepared workloads.
for f in fuzz/seeds/compiled_network/*.bpn; do [ -f "$f" ] && cp "$f" "$corpus/compiled_network/"; done
if [ -x target/release/backplane ] && [ -f "$model" ]; then
  plugins=$(mktemp -d)
  sets=(CpuRef)
  if [ -f target/release/libacme_cpufast.so ]; then
    cp target/release/libacme_cpufast.so "$plugins/Acme_CpuFast_backend.so"
    chmod 755 "$plugins" "$plugins/Acme_CpuFast_backend.so"
    sets+=(CpuFast,CpuRef)
  fi
  for backends in "${sets[@]}"; do
    target/release/backplane compile --path "$plugins" --backends "$backends" "$model" \
      --shape x=1,3,48,192 -o "$corpus/compiled_network/paddleocr_cls_${backends%%,*}.bpn" \
      >/dev/null 2>&1 || echo "note: no compiled paddleocr_cls seed for $backends"
  done
  rm -r "$plugins"
fi
# DESIGN §4.3's file-name table, valid and invalid.
i=0
for n in Arm_GpuAcc_backend.so Arm_GpuAcc_backend.so.1.2.3 Arm_GpuAcc_backend.so.10.1.27 \
  Arm123_GpuAcc_backend.so Arm_GpuAcc_backend.so.10.1.33. Arm_GpuAcc_backend.so.3.4..5 \
  Arm_GpuAcc_backend.so.1,1.1 Arm%Co_GpuAcc_backend.so Arm_Gpu.Acc_backend.so \
  GpuAcc_backend.so _GpuAcc_backend.so Arm__backend.so Arm_GpuAcc.so __backend.so __.so \
  Arm_GpuAcc_backend Arm_GpuAcc_backend_v1.2.so; do
  printf '%s' "$n" > "$corpus/file_name/seed$i"; i=$((i + 1))
done
# DESIGN §4.2's path-list examples.
i=0
for l in "" ":::" "/tmp:/tmp" "::/tmp:" ":/nonexistent::" "/tmp:/nonexistent:" \
  "/tmp:/nonexistent::/tmp:/nonexistent::/usr:/usr" "/tmp:/usr:/etc" "relative:/tmp"; do
  printf '%s' "$l" > "$corpus/path_list/seed$i"; i=$((i + 1))
done

cd fuzz
failed=()
for t in "${targets[@]}"; do
  echo "== fuzzing $t for ${seconds}s"
  set +e
  cargo +nightly fuzz run "$t" "../$corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=1048576 -print_final_stats=1 \
    > "../target/fuzz-logs/$t.log" 2>&1
  status=$?
  set -e
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|panicked|SUMMARY' \
    "../target/fuzz-logs/$t.log" || true
  if [ "$status" != 0 ]; then
    echo "fuzz target $t failed (status $status): see target/fuzz-logs/$t.log"
    failed+=("$t")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
