#!/bin/bash
# usage: ab2.sh ROUNDS benches threads binA binB ...   (each run on a fresh copy of the kept pool)
R=$1; B=$2; T=$3; shift 3
for r in $(seq 1 $R); do
  for bin in "$@"; do
    cp /mnt/pmhuge/fl.pool /mnt/pmhuge/run.pool
    $bin bench -n 10000000 -p 2000000 -t $T --max-seconds 30 --index ferrite --benches $B --pool_path /mnt/pmhuge/run.pool --skip_load --latency_sampling 0 --out /tmp/bo >/dev/null 2>&1
    python3 -c "
import json,sys;d=json.load(open('/tmp/bo/index.json'))
print('$r', '$(basename $bin)', ' '.join('%s:%d=%.3f' % (x['bench'], x['threads'], x['mops']) for x in d['results']))
"
  done
done
rm -f /mnt/pmhuge/run.pool
