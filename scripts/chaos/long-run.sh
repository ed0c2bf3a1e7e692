#!/usr/bin/env bash
# The long fault-injection run of the replicated service (issue 12): seeded
# runs one after another (a fresh 3-replica cluster of `ferrite serve` per run,
# cycling list, btree, wal) for MINUTES, each ~SECS s of faults (partitions,
# black holes, kill -9 of leader and follower, SIGSTOP past the election
# timeout, restart of all) under 4 recording clients; every history is checked
# with Porcupine (chaos/checker), for lost acknowledged writes and for
# identical replicas. Prints the summary (--json for JSON).
#
#   scripts/chaos/long-run.sh [MINUTES [SECS [FIRST_SEED]]] [--json]
#
# Exit status: 0 all runs clean, 3 a violation / lost write / divergence
# (histories, visualisations and replica logs are kept under
# ${TMPDIR:-/tmp}/ferrite-chaos-failures), 1 a run could not be carried out.
set -euo pipefail
cd "$(dirname "$0")/../.."
json=()
pos=()
for a in "$@"; do
    if [[ $a == --json ]]; then json=(--json); else pos+=("$a"); fi
done
minutes=${pos[0]:-20}
secs=${pos[1]:-20}
seed=${pos[2]:-1}
target=${CARGO_TARGET_DIR:-target}
cargo build --release --quiet -p ferrite-cli --bin ferrite
cargo build --release --quiet -p ferrite-chaos --bin ferrite-chaos
exec "$target/release/ferrite-chaos" --ferrite "$target/release/ferrite" \
    --minutes "$minutes" --secs-per-run "$secs" --seed "$seed" "${json[@]}"
