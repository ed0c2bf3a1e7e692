#!/bin/bash
# Binaries alternated, Ferrite alone: base = the commit before (the table maps
# the first 8 bytes), skip = the table skips the keys' common prefix.
# sk-*: 20-byte keys "user" + 16 hex digits; k20-*: 20-byte keys without a prefix.
for i in 1 2; do
  for b in base skip; do
    /tmp/ferrite-$b bench -n 10000000 -p 2000000 -t 1,2 -k 16 -f user --max-seconds 10 \
      --pool-dir /mnt/pmhuge --benches lookup,insert --compare ferrite --json > sk-$b-$i.json
  done
done
for b in base skip; do
  /tmp/ferrite-$b bench -n 10000000 -p 2000000 -t 1,2 -k 20 --max-seconds 10 \
    --pool-dir /mnt/pmhuge --benches lookup,insert --compare ferrite --json > k20-$b.json
done
