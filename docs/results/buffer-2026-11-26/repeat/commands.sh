#!/usr/bin/env bash
B=/tmp/buffer-ferrite-bin
O=/tmp/buffer-eval/repeat
r() { n=$1; shift; echo "== $n: $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"; $B bench buffer --out $O/$n "$@" > $O/$n.txt 2> $O/$n.err; echo "   exit $? at $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
r ycsb --experiment ycsb --sizes 128,1536,1920 --designs main-memory,ssd-bm,three-tier
r tpcc --experiment tpcc --warehouses 4 --designs pm-direct,three-tier
