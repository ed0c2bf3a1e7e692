#!/bin/bash
# Alternating binaries, 2-thread scans, fig2's flags: old (8761fb6, no directory), new (HEAD).
for i in 1 2 3; do
  for b in old new; do
    bin=/tmp/new-ferrite; [ $b = old ] && bin=/work/main/target-old/release/ferrite
    $bin bench -n 10000000 -p 2000000 -t 2 --max-seconds 10 --reload --pool-dir /mnt/pmhuge --benches scan,lookup --compare ferrite --json > $b-$i.json 2> $b-$i.err
    echo "$b $i: $(python3 -c "
import json
d=json.load(open('$b-$i.json'))
def walk(x):
    if isinstance(x,dict):
        if 'mops' in x: yield x
        for v in x.values(): yield from walk(v)
    elif isinstance(x,list):
        for v in x: yield from walk(v)
print(', '.join(f\"{r.get('bench',r.get('op'))} {r['mops']:.3f}\" for r in walk(d)))
")"
  done
done
