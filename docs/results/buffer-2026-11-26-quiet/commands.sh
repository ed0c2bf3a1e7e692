#!/bin/bash
# The close bars of issue 10 rerun on a quiet machine after the in-DRAM path
# changes (commits 92abd47, 8121635). Run from the repository root after
# `cargo build --release -p ferrite-cli`; OUT defaults to this directory.
set -e
OUT=${1:-docs/results/buffer-2026-11-26-quiet}
F=target/release/ferrite
$F bench buffer --experiment ycsb --sizes 1536,1920 --designs ssd-bm,three-tier --out $OUT/beyond-pm
$F bench buffer --experiment anchors --anchor-mib 128 --anchor-workloads ro --anchor-rounds 5 --out $OUT/anchors
$F bench buffer --experiment tpcc --warehouses 10 --designs ssd-bm,three-tier --out $OUT/tpcc
$F bench buffer --experiment ycsb --sizes 768 --designs pm-direct,three-tier --out $OUT/between
# the 1.9 GiB cell again (it measured 2.99x in the first run), three more times
for i in 2 3 4; do   # run 4 with the final binary (7dc100c)
  $F bench buffer --experiment ycsb --sizes 1920 --designs ssd-bm,three-tier --out $OUT/beyond-pm-1920-run$i
done
# TPC-C between DRAM and PM (4 warehouses), the other between-tiers bar
$F bench buffer --experiment tpcc --warehouses 4 --designs pm-direct,three-tier --out $OUT/tpcc-between
