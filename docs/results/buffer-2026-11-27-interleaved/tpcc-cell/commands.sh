#!/bin/bash
# The TPC-C cell between DRAM and PM (4 warehouses, 578 MiB: more than DRAM's
# 256 MiB, less than PM's 1280 MiB), PM-direct beside three-tier, measured
# interleaved: both stores loaded, warmed up 5 s each, then 5 alternating
# slices of 2 s each (the default --interleave 5). Seven runs in a row
# (2026-11-27, 17:45–17:57 UTC): new-1..3 with the first build of the change,
# s1..s4 with the final one (which adds each slice's throughput to the JSON).
# Run from the repository root after `cargo build --release -p ferrite-cli`.
set -e
F=${F:-target/release/ferrite}
OUT=${1:-docs/results/buffer-2026-11-27-interleaved/tpcc-cell}
for r in new-1 new-2 new-3 s1 s2 s3 s4; do
  mkdir -p $OUT/$r
  $F bench buffer --experiment tpcc --warehouses 4 --designs pm-direct,three-tier \
    --seconds 10 --out $OUT/$r > $OUT/$r/output.txt
done
