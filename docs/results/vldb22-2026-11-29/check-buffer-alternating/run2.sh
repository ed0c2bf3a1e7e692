#!/bin/bash
# Alternating: the same binary with and without the lookup/update answer buffer (NOPUSH=1), Ferrite alone, 1 thread.
for i in 1 2 3; do
  for b in push nopush; do
    if [ $b = nopush ]; then export NOPUSH=1; else unset NOPUSH; fi
    /tmp/nopush-ferrite bench -n 10000000 -p 2000000 -t 1 --max-seconds 10 --pool-dir /mnt/pmhuge --benches lookup,mixed,update --compare ferrite --json > $b-$i.json 2> $b-$i.err
    echo "$b $i: $(python3 -c "
import json
d=json.load(open('$b-$i.json'))
print(', '.join(f\"{r['bench']} {r['mops']:.3f}\" for r in d['results']))
")"
  done
done
