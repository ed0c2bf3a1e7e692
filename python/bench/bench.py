"""The Python binding against what a Python user would pick instead, in one run:
a dict (volatile, the speed of light), LMDB through the `lmdb` package and
sqlite3 (both durable stores), and ferrite's durable map. Every store gets the
same keys (8-byte big-endian integers, scrambled), values (`--value-size`
bytes) and operations:

  set    one write per call, durable when it returns where the store is durable
         (ferrite: m[k] = v; LMDB: one write transaction per put, sync on;
         sqlite3: autocommit INSERT OR REPLACE, WAL, synchronous=FULL)
  get    one read per call (LMDB: one read transaction per get)
  range  100 consecutive entries from a random key, 1/100 of the operations

Files go to --dir (tmpfs by default, like ferrite's pool), removed afterwards.
Every store is measured --rounds times (order rotating) and the median is
reported. Prints a table, or JSON with --json (what `ferrite bench facade` reads).

    python python/bench/bench.py --records 200000 [--json]
"""

import argparse
import gc
import statistics
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time

import ferrite

try:
    import lmdb
except ImportError:  # reported as missing, not silently skipped
    lmdb = None


def keys(n, seed):
    ids = list(range(n))
    random.Random(seed).shuffle(ids)
    return [((i * 0x9E3779B97F4A7C15) & (2**64 - 1)).to_bytes(8, "big") for i in ids]


def timed(fn, ops):
    """Mops per wall-clock second and per CPU second of this process (the
    latter is robust to other work on a shared machine; for LMDB and sqlite3
    it misses time blocked in fsync, which tmpfs makes nearly free)."""
    gc.disable()
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
    finally:
        gc.enable()
    return ops / dt / 1e6, ops / max(dc, 1e-9) / 1e6


class Dict:
    name = "dict"
    durability = "volatile (a Python dict)"

    def __init__(self, d):
        self.d = {}

    def set(self, ks, v):
        d = self.d
        for k in ks:
            d[k] = v

    def get(self, ks):
        d = self.d
        for k in ks:
            d[k]

    def range(self, starts, n, sorted_keys):
        # A dict has no order: keep a sorted key list beside it, as a user must.
        import bisect

        d = self.d
        for s in starts:
            i = bisect.bisect_left(sorted_keys, s)
            for k in sorted_keys[i : i + n]:
                d[k]

    def close(self):
        pass


class Ferrite:
    name = "ferrite"

    def __init__(self, d):
        self.db = ferrite.open(os.path.join(d, "ferrite.pool"), 4 << 30)
        self.m = self.db.map("bench")
        self.durability = f"ferrite map, pool in {d} ({self.db.durability})"

    def set(self, ks, v):
        m = self.m
        for k in ks:
            m[k] = v

    def get(self, ks):
        m = self.m
        for k in ks:
            m[k]

    def range(self, starts, n, sorted_keys):
        m = self.m
        for s in starts:
            it = m.range(s)
            for _ in range(n):
                if next(it, None) is None:
                    break

    def close(self):
        self.db.close()


class Lmdb:
    name = "lmdb"

    def __init__(self, d):
        self.env = lmdb.open(os.path.join(d, "lmdb"), map_size=4 << 30, sync=True, metasync=True)
        self.durability = f"LMDB {lmdb.version()}, sync on, in {d}"

    def set(self, ks, v):
        env = self.env
        for k in ks:
            with env.begin(write=True) as t:
                t.put(k, v)

    def get(self, ks):
        env = self.env
        for k in ks:
            with env.begin() as t:
                t.get(k)

    def range(self, starts, n, sorted_keys):
        with self.env.begin() as t:
            c = t.cursor()
            for s in starts:
                if c.set_range(s):
                    for i, _ in enumerate(c):
                        if i + 1 >= n:
                            break

    def close(self):
        self.env.close()


class Sqlite:
    name = "sqlite3"

    def __init__(self, d):
        self.c = sqlite3.connect(os.path.join(d, "sqlite.db"), isolation_level=None)
        self.c.execute("PRAGMA journal_mode=WAL")
        self.c.execute("PRAGMA synchronous=FULL")
        self.c.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
        self.durability = f"sqlite3 {sqlite3.sqlite_version}, WAL, synchronous=FULL, in {d}"

    def set(self, ks, v):
        c = self.c
        for k in ks:
            c.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (k, v))

    def get(self, ks):
        c = self.c
        for k in ks:
            c.execute("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()

    def range(self, starts, n, sorted_keys):
        c = self.c
        for s in starts:
            c.execute("SELECT k, v FROM kv WHERE k >= ? ORDER BY k LIMIT ?", (s, n)).fetchall()

    def close(self):
        self.c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=8)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--rounds", type=int, default=3, help="every store is measured this many times, in rotating order; medians are reported")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if lmdb is None:
        print("the lmdb package is not installed (pip install lmdb): LMDB is left out", file=sys.stderr)
    ks = keys(a.records, 1)
    probes = keys(a.records, 2)
    sorted_keys = sorted(ks)
    starts = random.Random(3).sample(ks, max(1, a.records // 100))
    v = b"v" * a.value_size
    classes = [Ferrite, Dict] + ([Lmdb] if lmdb else []) + [Sqlite]
    runs, notes = {}, {}
    for rnd in range(a.rounds):
        # Rotate the order so that no store always runs first (or last).
        order = classes[rnd % len(classes) :] + classes[: rnd % len(classes)]
        for cls in order:
            d = tempfile.mkdtemp(prefix="ferrite-pybench-", dir=a.dir)
            try:
                s = cls(d)
                notes[s.name] = f"{s.name}: {s.durability}"
                for bench, fn, ops in [
                    ("set", lambda: s.set(ks, v), len(ks)),
                    ("get", lambda: s.get(probes), len(probes)),
                    ("range100", lambda: s.range(starts, 100, sorted_keys), len(starts)),
                ]:
                    runs.setdefault((bench, s.name), []).append(timed(fn, ops))
                s.close()
            finally:
                shutil.rmtree(d, ignore_errors=True)
    results = [
        {
            "bench": bench,
            "variant": name,
            "mops": statistics.median(w for w, _ in v),
            "mops_cpu": statistics.median(c for _, c in v),
            "min_mops": min(w for w, _ in v),
            "max_mops": max(w for w, _ in v),
            "rounds": len(v),
            "records": a.records,
        }
        for (bench, name), v in sorted(runs.items(), key=lambda kv: [c.name for c in classes].index(kv[0][1]))
    ]
    notes = [notes[c.name] for c in classes]
    out = {
        "python": sys.version.split()[0],
        "records": a.records,
        "value_size": a.value_size,
        "results": results,
        "notes": notes,
    }
    if a.json:
        print(json.dumps(out))
        return
    print(
        f"Python {out['python']}, {a.records} records, {a.value_size}-byte values "
        "(M operations per CPU second; range100: M scans)"
    )
    for n in notes:
        print("  " + n)
    benches = ["set", "get", "range100"]
    print(f"{'':10}" + "".join(f"{b:>12}" for b in benches))
    for var in dict.fromkeys(r["variant"] for r in results):
        row = {r["bench"]: r["mops_cpu"] for r in results if r["variant"] == var}
        print(f"{var:10}" + "".join(f"{row[b]:12.3f}" for b in benches))


if __name__ == "__main__":
    main()
