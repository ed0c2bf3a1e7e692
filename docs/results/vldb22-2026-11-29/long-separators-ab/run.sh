#!/bin/bash
# Alternating base/new binaries, Ferrite only, 10 M records.
cd /tmp/abr
for rep in 1 2; do
 for k in 64 16; do
  [ $k = 16 ] && [ $rep = 2 ] && continue
  for b in base new; do
   rm -rf /mnt/pmhuge/*
   /tmp/ferrite-$b bench -n 10000000 -p 2000000 -t 1,2 -k $k --compare ferrite --benches lookup,insert --reload --max-seconds 10 --pool-dir /mnt/pmhuge --out /tmp/abr/out-$b-$k-$rep > /tmp/abr/$b-$k-$rep.txt 2>&1
  done
 done
done
echo done > /tmp/abr/DONE
