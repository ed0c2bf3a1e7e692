#!/bin/bash
# Issue 10's beyond-PM bars after the bench settles the load's write-back
# (BufferManager::write_pm_to_ssd after every load). Run from the repository
# root after `cargo build --release -p ferrite-cli`; OUT defaults to this
# directory.
set -e
OUT=${1:-docs/results/buffer-2026-11-27-settled}
F=target/release/ferrite
# before (commit 56e0d10, without the settling): the 1.9 GiB cell, three-tier
# only, with the default 5 s warm-up and with a 40 s one
#   $F bench buffer --experiment ycsb --sizes 1920 --designs three-tier --out $OUT/before-warmup5
#   $F bench buffer --experiment ycsb --sizes 1920 --designs three-tier --warmup-seconds 40 --out $OUT/before-warmup40
# after: the 1.9 GiB cell three times, TPC-C at 10 warehouses once
for i in 1 2 3; do
  $F bench buffer --experiment ycsb --sizes 1920 --designs ssd-bm,three-tier --out $OUT/beyond-pm-1920-run$i
done
$F bench buffer --experiment tpcc --warehouses 10 --designs ssd-bm,three-tier --out $OUT/tpcc
# and the 1.5 GiB cell once
$F bench buffer --experiment ycsb --sizes 1536 --designs ssd-bm,three-tier --out $OUT/beyond-pm-1536
