#!/usr/bin/env bash
# Runs the real PiBench driver (github.com/sfu-dis/pibench) against Ferrite's
# PiBench adapter (libferrite_pibench.so) and PiBench's own std::map wrapper
# (wrappers/stlmap, the same-run calibration baseline), then prints a summary.
# Exits non-zero, naming them, when any run failed (crash, timeout, missing
# key, non-zero exit of PiBench, no result in its output).
# See scripts/pibench/README.md. Nothing of PiBench is kept in this repository.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

# ---- configuration (environment) ----------------------------------------
PIBENCH_REPO=${PIBENCH_REPO:-https://github.com/sfu-dis/pibench}
PIBENCH_COMMIT=${PIBENCH_COMMIT:-11c74d694331967e58cfb555d06820f8a627a6f4}   # the adapter's interface is this commit's
WORK=${WORK:-${TMPDIR:-/tmp}/ferrite-pibench}
PIBENCH_SRC=${PIBENCH_SRC:-$WORK/pibench}            # cloned here if absent
PIBENCH_BUILD=${PIBENCH_BUILD:-$WORK/pibench-build}
PIBENCH_EBR=${PIBENCH_EBR:-ON}          # PiBench's PIBENCH_USE_EPOCH_BASED_RECLAMATION (needs libtbb-dev)
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
OUT=${OUT:-$WORK/results-$(date +%Y%m%d-%H%M%S)}
POOL_DIR=${POOL_DIR:-/dev/shm}
POOL_SIZE=${POOL_SIZE:-4294967296}
FERRITE_INDEX=${FERRITE_INDEX:-ferrite}  # FERRITE_PIBENCH_INDEX: ferrite | ferrite-dram
N=${N:-10000000}                         # records loaded
P=${P:-2000000}                          # operations per run
RUNS=${RUNS:-1}                          # runs per cell; the summary shows the median
THREADS=${THREADS:-"1 2"}
LIBS=${LIBS:-"ferrite stlmap"}
WORKLOADS=${WORKLOADS:-"lookup insert update remove scan mixed"}
SCAN_SIZE=${SCAN_SIZE:-100}
LATENCY=${LATENCY-0.1}                   # --latency_sampling for the extra latency runs (LATENCY= : none)
LATENCY_LIBS=${LATENCY_LIBS:-ferrite}
LATENCY_WORKLOADS=${LATENCY_WORKLOADS:-"lookup insert"}
LATENCY_THREADS=${LATENCY_THREADS:-1}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}          # seconds per PiBench run; a run that takes longer has failed
SKIP_BUILD=${SKIP_BUILD:-0}              # 1: reuse $PIBENCH_BUILD and the adapter in $CARGO_TARGET_DIR
PREFLIGHT=${PREFLIGHT:-1}                # 0: skip the adapter's tests against this checkout's tree_api.hpp
JOBS=${JOBS:-2}

log() { echo "[pibench] $*" >&2; }
die() { echo "[pibench] error: $*" >&2; exit 1; }

# ---- PiBench source --------------------------------------------------------
fetch_pibench() {
    if [ -f "$PIBENCH_SRC/CMakeLists.txt" ]; then
        log "using PiBench source at $PIBENCH_SRC"
        return
    fi
    command -v git >/dev/null || die "git is needed to clone PiBench (or set PIBENCH_SRC)"
    log "cloning $PIBENCH_REPO at $PIBENCH_COMMIT into $PIBENCH_SRC"
    mkdir -p "$(dirname "$PIBENCH_SRC")"
    git clone --quiet "$PIBENCH_REPO" "$PIBENCH_SRC" \
        || die "could not clone $PIBENCH_REPO (no network?); set PIBENCH_SRC to a PiBench checkout"
    git -C "$PIBENCH_SRC" checkout --quiet "$PIBENCH_COMMIT" \
        || die "commit $PIBENCH_COMMIT is not in $PIBENCH_REPO; use a clone that has it (PIBENCH_REPO or PIBENCH_SRC)"
}

# PiBench's CMakeLists runs `make lib` in $PIBENCH_SRC/pcm (the Intel PCM git
# submodule) and links pcm/libPCM.a; benchmark.hpp includes "cpucounters.h"
# unconditionally. Unless a real PCM checkout is there, point pcm/ at a stub
# (written outside the source tree) providing just those symbols; PCM::program()
# always fails there, so every run passes --pcm=false.
setup_pcm() {
    local pcm=$PIBENCH_SRC/pcm
    if [ -f "$pcm/Makefile" ] && [ -f "$pcm/cpucounters.h" ] && ! grep -q PIBENCH_PCM_STUB "$pcm/cpucounters.h"; then
        log "using the real Intel PCM checkout in $pcm"
        return
    fi
    local stub=$PIBENCH_BUILD-pcm-stub
    mkdir -p "$stub"
    cat >"$stub/cpucounters.h" <<'EOF'
// Stand-in for Intel PCM's cpucounters.h (PiBench's pcm/ submodule), written by
// ferrite's scripts/pibench/run.sh. It provides exactly the symbols PiBench's
// benchmark.{hpp,cpp} use and measures nothing: PCM::program() always fails,
// so PiBench must run with --pcm=false.
#ifndef PIBENCH_PCM_STUB_CPUCOUNTERS_H
#define PIBENCH_PCM_STUB_CPUCOUNTERS_H

#include <cstdint>
// Standard headers that the real cpucounters.h (via PCM's types.h etc.) pulls
// in transitively and that PiBench's benchmark.cpp relies on.
#include <iostream>
#include <istream>
#include <sstream>
#include <iomanip>
#include <string>
#include <vector>
#include <array>
#include <limits>
#include <memory>
#include <map>
#include <unordered_map>
#include <cstring>
#include <cassert>

class PCM
{
public:
    enum ErrorCode { Success = 0, MSRAccessDenied = 1, PMUBusy = 2, UnknownError };
    static PCM* getInstance();
    ErrorCode program();
    void resetPMU() {}
    void cleanup() {}
};

class SystemCounterState {};

inline SystemCounterState getSystemCounterState() { return SystemCounterState(); }
inline uint64_t getL3CacheMisses(const SystemCounterState&, const SystemCounterState&) { return 0; }
inline uint64_t getBytesReadFromMC(const SystemCounterState&, const SystemCounterState&) { return 0; }
inline uint64_t getBytesWrittenToMC(const SystemCounterState&, const SystemCounterState&) { return 0; }
inline uint64_t getBytesReadFromPMM(const SystemCounterState&, const SystemCounterState&) { return 0; }
inline uint64_t getBytesWrittenToPMM(const SystemCounterState&, const SystemCounterState&) { return 0; }

#endif
EOF
    cat >"$stub/cpucounters.cpp" <<'EOF'
#include "cpucounters.h"
#include <cstdio>

PCM* PCM::getInstance()
{
    static PCM instance;
    return &instance;
}

PCM::ErrorCode PCM::program()
{
    std::fprintf(stderr, "PCM stub: PiBench was built without Intel PCM; run with --pcm=false\n");
    return UnknownError;
}
EOF
    cat >"$stub/Makefile" <<'EOF'
# Stand-in for the Intel PCM submodule: PiBench's CMakeLists runs `make lib`
# here and links ./libPCM.a.
CXX ?= g++
lib: libPCM.a
libPCM.a: cpucounters.o
	ar rcs $@ $^
cpucounters.o: cpucounters.cpp cpucounters.h
	$(CXX) -O2 -fPIC -std=c++17 -c cpucounters.cpp -o $@
clean:
	rm -f cpucounters.o libPCM.a
.PHONY: lib clean
EOF
    if [ -L "$pcm" ]; then
        rm "$pcm"
    elif [ -d "$pcm" ]; then
        rmdir "$pcm" 2>/dev/null || die "$pcm is neither empty nor a PCM checkout; remove it or init the submodule"
    fi
    ln -s "$stub" "$pcm"
    log "pcm/ -> PCM stub at $stub (runs use --pcm=false)"
}

build_pibench() {
    [ -f /usr/include/numa.h ] || die "libnuma headers missing (apt-get install libnuma-dev)"
    if [ "$PIBENCH_EBR" = ON ] && [ ! -d /usr/include/tbb ] && [ ! -d /usr/include/oneapi/tbb ]; then
        die "TBB headers missing (apt-get install libtbb-dev, or PIBENCH_EBR=OFF)"
    fi
    mkdir -p "$PIBENCH_BUILD"
    log "configuring PiBench (Release, BUILD_TESTING=OFF, EBR=$PIBENCH_EBR) in $PIBENCH_BUILD"
    # BUILD_TESTING=OFF: the tests need the googletest submodule.
    cmake -S "$PIBENCH_SRC" -B "$PIBENCH_BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
        -DPIBENCH_USE_EPOCH_BASED_RECLAMATION="$PIBENCH_EBR" >"$PIBENCH_BUILD/cmake.log" 2>&1 ||
        { tail -20 "$PIBENCH_BUILD/cmake.log"; die "cmake failed"; }
    cmake --build "$PIBENCH_BUILD" -j "$JOBS" --target pibench-bin stlmap_wrapper \
        >"$PIBENCH_BUILD/build.log" 2>&1 || { tail -30 "$PIBENCH_BUILD/build.log"; die "PiBench build failed"; }
}

# PIBENCH_SRC is passed to cargo: the adapter's tests then compile their
# driver against this checkout's include/tree_api.hpp (crates/ferrite-pibench/
# build.rs), so a vtable or tree_options_t mismatch fails here, before any run.
build_adapter() {
    log "building libferrite_pibench.so (cargo, CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
    (cd "$repo" && PIBENCH_SRC="$PIBENCH_SRC" CARGO_TARGET_DIR="$CARGO_TARGET_DIR" \
        cargo build --release -p ferrite-pibench)
    [ "$PREFLIGHT" = 1 ] || return 0
    mkdir -p "$WORK"
    log "preflight: the adapter's tests against $PIBENCH_SRC/include/tree_api.hpp"
    (cd "$repo" && PIBENCH_SRC="$PIBENCH_SRC" CARGO_TARGET_DIR="$CARGO_TARGET_DIR" \
        cargo test --release -p ferrite-pibench) >"$WORK/preflight.log" 2>&1 ||
        { tail -30 "$WORK/preflight.log"; die "the adapter does not match $PIBENCH_SRC's interface (see $WORK/preflight.log; PREFLIGHT=0 skips this)"; }
}

# ---- runs ------------------------------------------------------------------
PIBENCH_BIN=$PIBENCH_BUILD/src/PiBench
lib_path() {
    case $1 in
        ferrite) echo "$CARGO_TARGET_DIR/release/libferrite_pibench.so" ;;
        stlmap) echo "$PIBENCH_BUILD/libstlmap_wrapper.so" ;;
        *) die "unknown library $1 (ferrite | stlmap)" ;;
    esac
}
workload_args() {
    case $1 in
        lookup) echo "-r 1" ;;
        insert) echo "-r 0 -i 1" ;;
        update) echo "-r 0 -u 1" ;;
        remove) echo "-r 0 -d 1" ;;
        scan) echo "-r 0 -s 1 --scan_size $SCAN_SIZE" ;;
        mixed) echo "-r 0.5 -u 0.5 --distribution SELFSIMILAR --skew 0.2" ;;
        *) die "unknown workload $1" ;;
    esac
}

RESULTS=""   # TSV rows: lib workload threads latency run rc load_ms completed_ops succeeded_ops p50 p99 p999 log failure
POOL=""
cleanup_pool() { [ -n "$POOL" ] && rm -f "$POOL"; return 0; }
trap cleanup_pool EXIT

run_one() { # lib workload threads latency run
    local lib=$1 wl=$2 t=$3 lat=$4 run=$5
    local so; so=$(lib_path "$lib")
    [ -f "$so" ] || die "$so not built"
    local tag="$lib-$wl-t$t${lat:+-lat$lat}-run$run"
    local logf="$OUT/$tag.log"
    # shellcheck disable=SC2206
    local cmd=("$PIBENCH_BIN" "$so" -n "$N" -p "$P" -t "$t" -k 8 -v 8 $(workload_args "$wl") --pcm=false)
    [ -n "$lat" ] && cmd+=(--latency_sampling "$lat")
    if [ "$lib" = ferrite ]; then
        POOL=$POOL_DIR/pibench-ferrite-$$.pool
        rm -f "$POOL"
        cmd+=(--pool_path "$POOL" --pool_size "$POOL_SIZE")
    fi
    log "$tag: ${cmd[*]}"
    local rc=0
    {
        echo "# ${cmd[*]}"
        echo "# FERRITE_PIBENCH_INDEX=$FERRITE_INDEX loadavg: $(cut -d' ' -f1-3 /proc/loadavg)"
    } >"$logf"
    FERRITE_PIBENCH_INDEX=$FERRITE_INDEX timeout "$RUN_TIMEOUT" "${cmd[@]}" >>"$logf" 2>&1 || rc=$?
    echo "# exit $rc, loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$logf"
    cleanup_pool
    POOL=""
    local load comp succ p50 p99 p999
    load=$(sed -n 's/^Loading finished in \([0-9.]*\) milliseconds.*/\1/p' "$logf" | head -1)
    comp=$(sed -n 's/^[[:space:]]*- Completed: \([0-9.]*\) ops\/s.*/\1/p' "$logf" | head -1)
    succ=$(sed -n 's/^[[:space:]]*- Succeeded: \([0-9.]*\) ops\/s.*/\1/p' "$logf" | head -1)
    p50=$(sed -n 's/^[[:space:]]*50%: \([0-9]*\).*/\1/p' "$logf" | head -1)
    p99=$(sed -n 's/^[[:space:]]*99%: \([0-9]*\).*/\1/p' "$logf" | head -1)
    p999=$(sed -n 's/^[[:space:]]*99\.9%: \([0-9]*\).*/\1/p' "$logf" | head -1)
    local why=""
    if [ "$rc" -eq 124 ]; then
        why="timed out after ${RUN_TIMEOUT}s"
    elif [ "$rc" -gt 128 ]; then
        why="killed by signal $((rc - 128)) (SIG$(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"
    elif grep -q "Error: missing key" "$logf"; then
        why="missing key at load verification (exit $rc)"
    elif [ "$rc" -ne 0 ]; then
        why="exit $rc"
    elif [ -z "$comp" ]; then
        why="no throughput in PiBench's output"
    fi
    [ -n "$why" ] && log "$tag: FAILED: $why (see $logf)"
    RESULTS+="$lib	$wl	$t	${lat:--}	$run	$rc	${load:--}	${comp:--}	${succ:--}	${p50:--}	${p99:--}	${p999:--}	$logf	${why:--}
"
}

summary() {
    printf '%s' "$RESULTS" >"$OUT/results.tsv"
    python3 - "$OUT/results.tsv" "$RUNS" <<'EOF'
import statistics, sys
from collections import OrderedDict
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
cells = OrderedDict()
for r in rows:
    cells.setdefault(tuple(r[:4]), []).append(r)
def med(vals, scale=1.0, fmt="{:.2f}"):
    v = [float(x) / scale for x in vals if x not in ("-", "")]
    return fmt.format(statistics.median(v)) if v else "-"
print(f"\nPiBench summary (median of {sys.argv[2]} run(s) per cell; Mops/s = completed ops/s / 1e6)")
hdr = ["lib", "workload", "thr", "lat", "Mops/s", "succ Mops/s", "load s", "p50 ns", "p99 ns", "p99.9 ns", "ok/runs"]
print("| " + " | ".join(hdr) + " |")
print("|" + "|".join("---" for _ in hdr) + "|")
for (lib, wl, t, lat), rs in cells.items():
    ok = [r for r in rs if r[13] == "-"]
    print("| " + " | ".join([lib, wl, t, lat,
        med([r[7] for r in ok], 1e6), med([r[8] for r in ok], 1e6), med([r[6] for r in ok], 1e3),
        med([r[9] for r in ok], fmt="{:.0f}"), med([r[10] for r in ok], fmt="{:.0f}"),
        med([r[11] for r in ok], fmt="{:.0f}"), f"{len(ok)}/{len(rs)}"]) + " |")
for r in rows:
    if r[13] != "-":
        lat = "" if r[3] == "-" else f" latency {r[3]}"
        print(f"FAILED: {r[0]} {r[1]} t={r[2]}{lat} run {r[4]}: {r[13]} ({r[12]})")
EOF
}

main() {
    if [ "$SKIP_BUILD" != 1 ]; then
        fetch_pibench
        setup_pcm
        build_pibench
        build_adapter
    fi
    [ -x "$PIBENCH_BIN" ] || die "$PIBENCH_BIN missing (build first)"
    mkdir -p "$OUT"
    {
        if git -C "$repo" rev-parse HEAD >/dev/null 2>&1; then
            echo "ferrite: $(git -C "$repo" rev-parse HEAD)$(git -C "$repo" diff --quiet HEAD || echo ' (uncommitted changes)')"
        else
            echo "ferrite: $repo (not a git checkout)"
        fi
        echo "pibench: $(git -C "$PIBENCH_SRC" rev-parse HEAD 2>/dev/null || echo "$PIBENCH_SRC (not a git checkout)")"
        echo "N=$N P=$P RUNS=$RUNS THREADS=$THREADS LIBS=$LIBS WORKLOADS=$WORKLOADS LATENCY=$LATENCY"
        echo "nproc=$(nproc) $(grep -m1 'model name' /proc/cpuinfo || true)"
    } | tee "$OUT/env.txt" >&2
    local lib wl t run
    for lib in $LIBS; do
        for wl in $WORKLOADS; do
            for t in $THREADS; do
                for run in $(seq 1 "$RUNS"); do run_one "$lib" "$wl" "$t" "" "$run"; done
            done
        done
    done
    if [ -n "$LATENCY" ]; then
        for lib in $LATENCY_LIBS; do
            for wl in $LATENCY_WORKLOADS; do
                for t in $LATENCY_THREADS; do
                    for run in $(seq 1 "$RUNS"); do run_one "$lib" "$wl" "$t" "$LATENCY" "$run"; done
                done
            done
        done
    fi
    summary | tee "$OUT/summary.md"
    log "logs and summary in $OUT"
    local failed
    failed=$(printf '%s' "$RESULTS" | awk -F'\t' '$14 != "-"' | wc -l)
    if [ "$failed" -gt 0 ]; then
        log "$failed of $(printf '%s' "$RESULTS" | grep -c .) runs FAILED:"
        printf '%s' "$RESULTS" | awk -F'\t' '$14 != "-" {
            printf "[pibench]   %s %s t=%s%s run %s: %s\n", $1, $2, $3, ($4 == "-" ? "" : " latency " $4), $5, $14 }' >&2
        exit 1
    fi
}

main "$@"
