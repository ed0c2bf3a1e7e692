#!/usr/bin/env bash
# Reproduces the VLDB'22 evaluation's figures ("Evaluating Persistent Memory
# Range Indexes: Part Two") with every peer that scripts/peers/build.sh built
# and Ferrite in the same `ferrite bench` runs: one invocation per figure,
# each writing its JSON, table and charts to $OUT/<figure>.*, then
# summary.py builds $OUT/summary.md (every cell: Ferrite, each peer, the
# ratio to the best peer that answered correctly, and this machine's floor).
# See scripts/peers/README.md.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

WRAPPERS=${WRAPPERS:-${TMPDIR:-/tmp}/ferrite-peers/wrappers}   # build.sh's OUT
OUT=${OUT:-${TMPDIR:-/tmp}/ferrite-peers/vldb22-$(date +%Y%m%d-%H%M%S)}
FERRITE=${FERRITE:-$repo/target/release/ferrite}
N=${N:-10000000}            # records loaded (the paper: 100 M)
P=${P:-2000000}             # operations per run
THREADS=${THREADS:-1,2}     # the paper: 1..80; this machine: 2 cores
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}   # the paper's 10-second runs
FIGURES=${FIGURES:-"floor fig2 fig4skew fig5 fig7 fig9 fig10"}
POOL_DIR=${POOL_DIR:-/dev/shm}
# Each figure's comparison this many times, the indexes in a rotated order,
# each cell the median round (`ferrite bench --rounds`): the machine drifts
# over minutes and one round measures its indexes minutes apart.
ROUNDS=${ROUNDS:-1}

log() { echo "[vldb22] $*" >&2; }
[ -x "$FERRITE" ] || { log "build Ferrite first: cargo build --release (no $FERRITE)"; exit 1; }
[ -f "$WRAPPERS/manifest.tsv" ] || { log "no $WRAPPERS/manifest.tsv: run scripts/peers/build.sh first"; exit 1; }
mkdir -p "$OUT"
# The largest pool of any peer: ROART (DCMM) touches about 1.2 KB of its
# sparse pool file per record at 10 M records and dies of SIGBUS when the
# filesystem has no page for it (a tmpfs is limited by its size=, not by RAM).
need=$(( N * 1200 + (1 << 30) ))
avail=$(df -B1 --output=avail "$POOL_DIR" 2>/dev/null | tail -1 | tr -d ' ')
if [ -n "$avail" ] && [ "$avail" -lt "$need" ]; then
    log "warning: $POOL_DIR has $((avail >> 20)) MiB free; ROART's pool needs about $((need >> 20)) MiB for $N records (it will die of SIGBUS): mount a larger tmpfs (size=) or set POOL_DIR"
fi

# The --compare entry of a built peer library (empty if it was not built).
spec() { awk -F'\t' -v p="$1" '$1 == p && $2 == "ok" { print $3 }' "$WRAPPERS/manifest.tsv"; }
# A comma list of the built ones among $@, with ferrite variants first.
compare() {
    local out="" s
    for p in "$@"; do
        case $p in
            ferrite|ferrite-dram|btreemap|btreemap-u64|skiplist) s=$p ;;
            *) s=$(spec "$p") ;;
        esac
        if [ -n "$s" ]; then out="${out:+$out,}$s"; else log "  $p: not built, left out"; fi
    done
    echo "$out"
}
PM_PEERS="fptree_pmem lbtree_pmem dptree_pmem roart_dcmm roart_pmdk pactree_pmem utree"
VAR_PEERS="fptree_pmem_varkey lbtree_pmem_varkey dptree_pmem_varkey roart_dcmm"
DRAM_PEERS="fptree_dram lbtree_dram roart_dram"
COUNT_PEERS="fptree_pmem_count lbtree_pmem_count dptree_pmem_count roart_dcmm_count pactree_pmem_count utree_count"

bench() {  # bench NAME ARGS...: one ferrite bench invocation
    local name=$1; shift
    log "$name: ferrite bench $* (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    local t0=$SECONDS
    # --reload: as PiBench, a run that follows inserts or removes starts from a
    # fresh load (so the 2-thread insert run is not measured on the index the
    # 1-thread run grew).
    "$FERRITE" bench -n "$N" -p "$P" -t "${BENCH_THREADS:-$THREADS}" --max-seconds "$SECONDS_PER_RUN" \
        --rounds "$ROUNDS" --reload --pool-dir "$POOL_DIR" --out "$OUT" --stem "$name" "$@" >"$OUT/$name.txt" 2>"$OUT/$name.err"
    local rc=$?
    echo "$name: exit $rc, $((SECONDS - t0)) s, load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/runs.log"
    log "$name: exit $rc after $((SECONDS - t0)) s"
}

for f in $FIGURES; do
    case $f in
        # Fig. 2 (1 thread), Fig. 4 (a-d) uniform scaling, Fig. 6 tail latency
        # (10% of operations timed, as the paper), Table 3 (memory after the
        # load), and issue 13's core comparison (with mixed: 50% lookups, 50%
        # updates, selfsimilar 0.2). Scans last: several peers' scans crash
        # them or leave them unusable.
        fig2) bench fig2 --benches lookup,update,mixed,insert,scan --latency_sampling 0.1 \
                  --compare "$(compare ferrite $PM_PEERS)" ;;
        # Fig. 4 (e-g): self-similar, 80% of the accesses on 20% of the keys.
        fig4skew) bench fig4skew --distribution SELFSIMILAR --skew 0.2 --benches lookup,update,scan \
                  --latency_sampling 0 --compare "$(compare ferrite $PM_PEERS)" ;;
        # Fig. 5: lookup/insert mixes, uniform.
        fig5) bench fig5 --benches r90i10,r50i50,r10i90 --latency_sampling 0 \
                  --compare "$(compare ferrite $PM_PEERS)" ;;
        # Fig. 7: variable-length keys through the peers' var-key builds;
        # lookups and inserts, as the paper (the var-key wrappers' scans read
        # the key's first 8 bytes as the key).
        fig7) for k in 16 64; do
                  bench "fig7-k$k" -k "$k" --benches lookup,insert --latency_sampling 0 \
                      --compare "$(compare ferrite $VAR_PEERS)"
              done ;;
        # Beyond the paper (not in the default list): keys with a common
        # prefix, "user" and 16 hex digits (YCSB's shape), through the
        # var-key builds; lookups and inserts, as Fig. 7.
        prefix) bench prefix-k16 -k 16 -f user --benches lookup,insert --latency_sampling 0 \
                    --compare "$(compare ferrite $VAR_PEERS)" ;;
        # Fig. 9: PM bytes written per operation = cache lines flushed x 64,
        # with the peers' counting builds (their throughput is not reported:
        # the counter costs an atomic add per flush).
        fig9) BENCH_THREADS=1 bench fig9 --benches lookup,update,insert,scan --latency_sampling 0 \
                  --compare "$(compare ferrite $COUNT_PEERS)" ;;
        # Fig. 10: the PM indexes in DRAM mode against DRAM indexes.
        fig10) bench fig10 --benches lookup,update,insert,scan --latency_sampling 0 \
                   --compare "$(compare ferrite-dram $DRAM_PEERS btreemap btreemap-u64 skiplist)" ;;
        # This machine's floor: dependent reads and persist barriers.
        floor) log "floor: ferrite bench memory / persist"
               "$FERRITE" bench memory --pool-dir "$POOL_DIR" --out "$OUT" --json >"$OUT/floor-memory.json" 2>"$OUT/floor-memory.err"
               "$FERRITE" bench persist --pool-dir "$POOL_DIR" --out "$OUT" --json >"$OUT/floor-persist.json" 2>"$OUT/floor-persist.err"
               "$FERRITE" bench cache --pool-dir "$POOL_DIR" --out "$OUT" --json >"$OUT/floor-cache.json" 2>"$OUT/floor-cache.err" ;;
        *) log "unknown figure $f" ;;
    esac
done
# The cache a dependent reader gets changes over minutes on a shared host
# (3 to 12 MiB within half an hour on the AMD EPYC machine): measured again
# after the figures, so the summary shows what the runs had between the two.
case " $FIGURES " in
    *" floor "*) log "cache after the figures: ferrite bench cache"
                 "$FERRITE" bench cache --pool-dir "$POOL_DIR" --out "$OUT/cache-after" --json \
                     >"$OUT/floor-cache-after.json" 2>"$OUT/floor-cache-after.err" ;;
esac
python3 "$here/summary.py" "$OUT" >"$OUT/summary.md" && log "summary: $OUT/summary.md"
log "results in $OUT"
