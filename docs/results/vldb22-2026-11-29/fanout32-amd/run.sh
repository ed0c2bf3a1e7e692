#!/bin/bash
# Alternating binaries, Ferrite only, 10 M records, 8-byte keys.
cd /tmp/ab
for rep in 1 2; do
  for b in base f32; do
   rm -rf /mnt/pmhuge/*
   /tmp/ab/ferrite-$b bench -n 10000000 -p 2000000 -t 1,2 --compare ferrite --benches lookup,update,insert --reload --max-seconds 10 --pool-dir /mnt/pmhuge --out /tmp/ab/out-$b-$rep > /tmp/ab/$b-$rep.txt 2>&1
  done
done
echo done > /tmp/ab/DONE
