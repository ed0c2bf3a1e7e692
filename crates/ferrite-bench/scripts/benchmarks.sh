#!/usr/bin/env bash
# The runs behind docs/fragments/bench-benchmarks.md. Usage:
#   crates/ferrite-bench/scripts/benchmarks.sh [FERRITE_BIN] [ADAPTER_SO] [DRIVER] [OUT]
# Defaults build with cargo. Takes 20-40 minutes on the 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/../../.."
F=${1:-}
SO=${2:-}
DRV=${3:-}
OUT=${4:-bench-out/docs}
if [ -z "$F" ]; then
  cargo build --release -p ferrite-cli -p ferrite-pibench
  T=${CARGO_TARGET_DIR:-target}
  F=$T/release/ferrite
  SO=$T/release/libferrite_pibench.so
  DRV=$(ls -t "$T"/release/build/ferrite-pibench-*/out/pibench_driver | head -1)
fi
mkdir -p "$OUT"
N=10000000
P=2000000
# 1. Indexes against the baselines, 8-byte keys and values, 1 and 2 threads.
"$F" bench -n $N -p $P -t 1,2 --compare ferrite,ferrite-dram,btreemap,redb \
  --out "$OUT" --stem pibench-8b > "$OUT/pibench-8b.txt"
# 2. String keys (redb left out: its 10 M load alone takes minutes per key size).
for K in 16 64; do
  "$F" bench -n $N -p $P -t 1,2 -k $K --compare ferrite,ferrite-dram,btreemap \
    --out "$OUT" --stem pibench-k$K > "$OUT/pibench-k$K.txt"
done
# 3. Ferrite alone, three times, for medians against the PiBench peer table.
for R in 1 2 3; do
  "$F" bench -n $N -p $P -t 1,2 --index ferrite --seed $((1729 + R)) \
    --out "$OUT" --stem ferrite-run$R > "$OUT/ferrite-run$R.txt"
done
# 4. Through the PiBench adapter (tree_api via dlopen), PiBench-shaped runs.
: > "$OUT/adapter.jsonl"
for T in 1 2; do
  for M in lookup insert update scan mixed; do
    POOL=/dev/shm/ferrite-adapter-bench-$$.pool
    rm -f "$POOL"
    "$DRV" bench "$SO" "$POOL" $N $P $T $M >> "$OUT/adapter.jsonl"
    rm -f "$POOL"
  done
done
# 5. The default run (what the README's `ferrite bench` does), timed.
/usr/bin/time -f "%e s" -o "$OUT/default-time.txt" "$F" bench --out "$OUT" --stem default > "$OUT/default.txt"
