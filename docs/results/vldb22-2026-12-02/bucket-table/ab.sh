#!/bin/bash
# usage: ab.sh ROUNDS bench threads binA binB ...
R=$1; B=$2; T=$3; shift 3
for r in $(seq 1 $R); do
  for bin in "$@"; do
    $bin bench -n 10000000 -p 3000000 -t $T --max-seconds 30 --index ferrite --benches $B --pool_path /mnt/pmhuge/fl.pool --skip_load --latency_sampling 0 --out /tmp/bo >/dev/null 2>&1
    python3 -c "
import json,sys;d=json.load(open('/tmp/bo/index.json'))
for x in d['results']:
  print('$r', '$(basename $bin)', x.get('bench',x.get('op')), x.get('threads'), round(x.get('mops', x.get('throughput_mops',0)),3), round(x.get('mops_cpu', 0),3) if 'mops_cpu' in x else '')
"
  done
done
