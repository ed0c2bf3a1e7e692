#!/usr/bin/env bash
# The buffer manager's evaluation (docs/BENCHMARKS.md, "Buffer manager"), one
# `ferrite bench buffer` invocation per experiment group so that each finishes
# (and is written) on its own. Usage: scripts/buffer-bench/run.sh [OUT_DIR] [GROUP...]
# (groups: devices ycsb tpcc mid anchors rebuild mix restart model; default all).
# Needs root (the anchors' memory cgroups) and a release build. Capacities are
# the defaults: DRAM 256 MiB / PM 1280 MiB (a pool on /dev/shm) / SSD 6400 MiB
# (page files on /tmp, O_DIRECT), the thesis's 2 / 10 / 50 GB scaled by 1/8.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-bench-out/buffer}
shift || true
GROUPS_=${*:-devices ycsb tpcc mid anchors rebuild mix restart model}
BIN=${FERRITE:-target/release/ferrite}
mkdir -p "$OUT"
run() {
    local name=$1; shift
    echo "== $name: $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$BIN" bench buffer --out "$OUT/$name" "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"
    echo "   exit $? at $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
}
for g in $GROUPS_; do
    case $g in
    devices)
        echo "== devices: $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
        python3 scripts/buffer-bench/device_latency.py --mib 1024 --reads 4000 > "$OUT/devices.json"
        ;;
    ycsb)    run ycsb    --experiment ycsb --sizes 128,768,1536,1920 ;;
    tpcc)    run tpcc    --experiment tpcc --warehouses 1,4,10 ;;
    mid)     run mid     --experiment drilldown,updates,wear --mid-mib 1024 --wear-ops 300000 ;;
    anchors) run anchors --experiment anchors --anchor-mib 128,1024 ;;
    rebuild) run rebuild --experiment rebuild ;;
    mix)     run mix     --experiment mix ;;
    restart) run restart --experiment restart --restart-mib 64,320 ;;
    # The thesis's premise on hardware without PM's read latency: a modelled
    # 300 ns per PM line that misses a modelled 16 MiB CPU cache (Optane's
    # measured 403 ns read latency minus DRAM's 121 ns, thesis Table 1.2).
    model)   run model   --experiment ycsb,drilldown --sizes 128,768 --pm-read-ns 300 \
                 --designs main-memory,pm-direct,basic-pm,ssd-bm,three-tier --mid-mib 1024 ;;
    *) echo "unknown group $g" >&2; exit 2 ;;
    esac
done
