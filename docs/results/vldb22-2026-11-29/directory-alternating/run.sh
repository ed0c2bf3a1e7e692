#!/bin/bash
# Alternating binaries: old (8761fb6, no directory) and new (the directory), Ferrite alone, fig2's flags, 1 thread.
for i in 1 2 3; do
  for b in old new; do
    bin=/tmp/$b-ferrite; [ $b = old ] && bin=/work/main/target-old/release/ferrite
    $bin bench -n 10000000 -p 2000000 -t 1 --max-seconds 10 --reload --pool-dir /mnt/pmhuge --benches lookup,update,mixed --compare ferrite --json > $b-$i.json 2> $b-$i.err
    echo "$b $i: $(python3 -c "
import json,sys
d=json.load(open('$b-$i.json'))
rs=d['results'] if isinstance(d,dict) and 'results' in d else d
out=[]
for r in rs:
    if isinstance(r,dict) and 'mops' in r: out.append(f\"{r.get('bench',r.get('op'))} {r['mops']:.3f}\")
print(', '.join(out))
" 2>&1 | head -3)"
  done
done
