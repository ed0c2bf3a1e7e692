#!/usr/bin/env bash
# The buffer manager's evaluation (docs/BENCHMARKS.md, "Buffer manager"), one
# `ferrite bench buffer` invocation per experiment group so that each finishes
# (and is written) on its own. Usage: scripts/buffer-bench/run.sh [OUT_DIR]
# Needs root (the anchors' memory cgroups) and a release build.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-bench-out/buffer}
BIN=${FERRITE:-target/release/ferrite}
mkdir -p "$OUT"
run() {
    local name=$1; shift
    echo "== $name: $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$BIN" bench buffer --out "$OUT/$name" "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"
    echo "   exit $? at $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
}
run ycsb     --experiment ycsb --sizes 128,768,1536
run tpcc     --experiment tpcc --warehouses 1,4,10
run mid      --experiment drilldown,updates,wear --mid-mib 1024 --wear-ops 300000
run anchors  --experiment anchors --anchor-mib 128,1024
run rebuild  --experiment rebuild
run mix      --experiment mix
run restart  --experiment restart --restart-mib 64,320
