#!/bin/bash
# Issue 10's "between DRAM and PM" TPC-C cell (4 warehouses, 578 MiB: more than
# DRAM's 256 MiB, less than PM's 1280 MiB), PM-direct beside three-tier, six
# alternating rounds of two binaries: "old" = commit e126b2d, "new" = f0602fa
# (a DRAM frame written back to PM is read in place instead of copied first).
# Each binary built with `cargo build --release -p ferrite-cli` at its commit
# and copied to /tmp/tp/ferrite-{old,new}. Quiet machine (load average 0.85-1.24).
set -e
OUT=${1:-docs/results/buffer-2026-11-27-between}
for i in 1 2 3 4 5 6; do
  for b in old new; do
    /tmp/tp/ferrite-$b bench buffer --experiment tpcc --warehouses 4 \
      --designs pm-direct,three-tier --seconds 10 --out $OUT/$b-$i > $OUT/$b-$i/output.txt
  done
done
# then YCSB-RO at 768 MiB (746 MiB of data), the "after" binary, four runs
for i in 1 2 3 4; do
  /tmp/tp/ferrite-new bench buffer --experiment ycsb --sizes 768 --designs pm-direct,three-tier \
    --out $OUT/ycsb-768-run$i > $OUT/ycsb-768-run$i/output.txt
done
# rebuild and wear with the current binary (target/release/ferrite at 73d1c00)
F=target/release/ferrite
$F bench buffer --experiment rebuild --out $OUT/rebuild > $OUT/rebuild/output.txt
$F bench buffer --experiment wear --mid-mib 1024 --wear-ops 300000 --out $OUT/wear > $OUT/wear/output.txt
# the in-DRAM anchors, five rounds (current binary)
$F bench buffer --experiment anchors --anchor-mib 128 --anchor-workloads ro --anchor-rounds 5 --out $OUT/anchors > $OUT/anchors/output.txt
# A/B in DRAM: the binary of the 2026-11-26 quiet anchors run (7dc100c, built from a
# worktree into /tmp/tp/ferrite-7dc) against the current one, alternating
for i in 1 2 3; do
  for b in 7dc new; do
    /tmp/tp/ferrite-$b bench buffer --experiment ycsb --sizes 128 --designs main-memory,three-tier \
      --out $OUT/in-dram-ab/$b-$i > $OUT/in-dram-ab/$b-$i/output.txt
  done
done
