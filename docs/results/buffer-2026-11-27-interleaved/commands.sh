#!/bin/bash
# Issue 10's bars in one run of `ferrite bench buffer` (the issue: "On this
# machine, in one run"), run twice in a row (run1/, run2/: the issue's
# "independent rerun"), with the binary of the commit that interleaves the
# sweeps: the designs of a YCSB or TPC-C sweep cell are loaded together and
# measured in 5 alternating slices of 1 s (the default --interleave 5), so
# that the machine's slow spells fall on every design of a ratio alike.
# One invocation measures:
#   - YCSB-RO at 128 MiB (in DRAM: three-tier vs main-memory), 768 MiB
#     (between DRAM and PM: three-tier vs PM-direct) and 1920 MiB (beyond PM:
#     three-tier vs the SSD buffer manager);
#   - TPC-C at 4 warehouses (between DRAM and PM) and 10 (beyond PM);
#   - the anchors (LMDB, SQLite in a 256 MiB memory cgroup) at 128 MiB (in DRAM)
#     and 1024 MiB (beyond the DRAM budget), read-only and 50 % updates,
#     3 alternating rounds;
#   - PM writes per line after 300,000 updates of 1 GiB (wear);
#   - the page-table rebuild of a full PM tier.
# Run from the repository root after `cargo build --release -p ferrite-cli`.
set -e
OUT=${1:-docs/results/buffer-2026-11-27-interleaved/run1}
F=${F:-target/release/ferrite}
$F bench buffer --experiment ycsb,tpcc,anchors,wear,rebuild \
  --designs main-memory,pm-direct,ssd-bm,three-tier \
  --sizes 128,768,1920 --warehouses 4,10 \
  --anchor-mib 128,1024 --anchor-workloads ro,rw50 --anchor-rounds 3 \
  --mid-mib 1024 --wear-ops 300000 --out $OUT > $OUT/output.txt
