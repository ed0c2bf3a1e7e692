#!/bin/bash
# Alternating binaries (new = append-only long separators; spin = plus the spinning structure mutex), Ferrite only, 10 M records.
cd /tmp/abs
for rep in 1 2; do
  for b in new spin; do
   rm -rf /mnt/pmhuge/*
   /tmp/ferrite-$b bench -n 10000000 -p 2000000 -t 1,2 -k 64 --compare ferrite --benches insert --reload --max-seconds 10 --pool-dir /mnt/pmhuge --out /tmp/abs/out-$b-64-$rep > /tmp/abs/$b-64-$rep.txt 2>&1
   rm -rf /mnt/pmhuge/*
   /tmp/ferrite-$b bench -n 10000000 -p 2000000 -t 1,2 -k 8 --compare ferrite --benches insert,update --reload --max-seconds 10 --pool-dir /mnt/pmhuge --out /tmp/abs/out-$b-8-$rep > /tmp/abs/$b-8-$rep.txt 2>&1
  done
done
echo done > /tmp/abs/DONE
