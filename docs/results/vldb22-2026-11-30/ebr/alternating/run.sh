#!/bin/bash
# Alternating binaries under fig2's flags, Ferrite alone: old = 4695e2a (crossbeam-epoch pins),
# new = the own epoch scheme (pins without a locked instruction); T threads, PAIRS pairs.
T=${T:-1}
PAIRS=${PAIRS:-2}
for i in $(seq 1 "$PAIRS"); do
  for b in old new; do
    /tmp/$b-ferrite bench -n 10000000 -p 2000000 -t "$T" --max-seconds 10 --reload \
      --pool-dir /mnt/pmhuge --benches lookup,update,mixed,scan,insert --compare ferrite \
      --json > "$b-$T-$i.json" 2> "$b-$T-$i.err"
    echo "$b t$T $i: $(python3 -c "
import json
d=json.load(open('$b-$T-$i.json'))
print(', '.join(f\"{r['bench']} {r['mops']:.3f}\" for r in d['results']))
")"
  done
done
