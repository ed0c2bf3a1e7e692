#!/bin/bash
# A/B of the index harness: old = 6aaf0ef (checks inline), new = 888ad05 (checks deferred)
for i in 1 2; do for b in old new; do
  echo "== $b $i $(cut -d' ' -f1-3 /proc/loadavg)"
  ./ferrite-$b bench --index ferrite -n 10000000 -p 2000000 -t 1 --benches lookup,scan,update,mixed,insert --pool-dir /mnt/pmhuge --max-seconds 20 --json > $b-$i.json 2> $b-$i.err
done; done
