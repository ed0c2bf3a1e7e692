#!/bin/bash
# Alternating binaries: old (b86f661, check buffer 8 Mi answers) and new (32 Ki), Ferrite alone, fig2's flags, 1 thread.
T=${T:-1}
for i in 1 2 3; do
  for b in old new; do
    bin=/tmp/chk-ferrite; [ $b = old ] && bin=/tmp/new-ferrite
    $bin bench -n 10000000 -p 2000000 -t $T --max-seconds 10 --reload --pool-dir /mnt/pmhuge --benches lookup,update,mixed,scan --compare ferrite --json > $b-$T-$i.json 2> $b-$T-$i.err
    echo "$b t$T $i: $(python3 -c "
import json
d=json.load(open('$b-$T-$i.json'))
print(', '.join(f\"{r['bench']} {r['mops']:.3f}\" for r in d['results']))
")"
  done
done
