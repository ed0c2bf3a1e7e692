#!/usr/bin/env python3
"""Markdown tables for docs/fragments/bench-benchmarks.md from the JSON that
crates/ferrite-bench/scripts/benchmarks.sh leaves in its output directory.

    python3 crates/ferrite-bench/scripts/tables.py bench-out/docs [SECTION]

SECTION (default all): peers, 8b, latency, memory, keys, adapter.
"""
import json
import statistics
import sys
from pathlib import Path

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "bench-out/docs")

# The PiBench peer table (Mops/s, median of 3, 10 M records, 2 M ops).
PEERS = {
    "FPTree": {"lookup": (1.13, 2.62), "insert": (0.83, 1.65), "update": (0.81, 1.59), "scan": (0.22, 0.42), "mixed": (1.12, 2.33)},
    "LB+-Tree": {"lookup": (2.15, 4.38), "insert": (2.54, 5.10), "update": (1.90, 4.04), "scan": (0.13, 0.28), "mixed": (2.32, 4.89)},
    "DPTree": {"lookup": (2.36, 4.69), "insert": (1.31, 1.70), "update": (1.75, 3.13), "scan": (0.56, 1.08), "mixed": (2.37, 4.29)},
    "ROART": {"lookup": (1.25, 2.24), "insert": (0.23, 0.44), "update": (0.59, 1.16), "scan": (0.03, 0.07), "mixed": (0.94, 1.80)},
    "PACTree": {"lookup": (1.79, 3.21), "insert": (0.88, 1.43), "update": (1.18, 2.13), "scan": (0.60, 0.98), "mixed": (1.66, 2.75)},
    "uTree": {"lookup": (1.31, 2.64), "insert": (0.58, 1.08), "update": (0.99, 1.96), "scan": (0.05, 0.09), "mixed": (1.30, 2.56)},
}
BAR = {"lookup": 1.5, "scan": 1.5, "mixed": 1.5, "insert": 1.2, "update": 1.2}
# VLDB'22 Table 3, GB after 100 M records -> bytes per record.
TABLE3 = {"FPTree": (0.14, 2.69), "LB+-Tree": (0.34, 2.54), "ROART": (0.14, 18.92),
          "DPTree": (1.14, 4.79), "PACTree": (0.18, 3.2), "uTree": (2.63, 3.2)}


def load(stem):
    p = OUT / f"{stem}.json"
    return json.loads(p.read_text()) if p.exists() else None


def f(x, d=2):
    return "-" if x is None else f"{x:.{d}f}"


def peers_table():
    runs = [r for r in (load(f"ferrite-run{i}") for i in (1, 2, 3)) if r]
    if not runs:
        return
    print(f"Ferrite (PM pool in /dev/shm), median of {len(runs)} runs, against the best peer:\n")
    print("| op | threads | ferrite Mops/s (wall) | ferrite Mops/s (on-CPU) | best peer | ratio wall | ratio on-CPU | bar | met (wall / on-CPU) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for op in ["lookup", "insert", "update", "scan", "mixed"]:
        for ti, t in enumerate((1, 2)):
            vals = [x for r in runs for x in r["results"] if x["bench"] == op and x["threads"] == t]
            if not vals:
                continue
            wall = statistics.median(x["mops"] for x in vals)
            cpu = statistics.median(x.get("mops_cpu", 0) for x in vals)
            name, best = max(((n, p[op][ti]) for n, p in PEERS.items()), key=lambda z: z[1])
            bar = BAR[op]
            rw, rc = wall / best, cpu / best
            met = f"{'yes' if rw >= bar else 'no'} / {'yes' if rc >= bar else 'no'}"
            print(f"| {op} | {t} | {wall:.2f} | {cpu:.2f} | {name} {best:.2f} | {rw:.2f}x | {rc:.2f}x | {bar}x | {met} |")
    print()


def compare_table(stem, title):
    r = load(stem)
    if not r:
        return
    env = r["environment"]
    parts = r["command"].split()
    parts[0] = "ferrite"
    if "--out" in parts:
        i = parts.index("--out")
        del parts[i:i + 2]
    print(f"{title} (`{' '.join(parts)}`; load average before/after: "
          f"{env.get('loadavg_before')} / {env.get('loadavg_after')} on {env.get('cpus')} cores)\n")
    variants = list(dict.fromkeys(x["variant"] for x in r["results"]))
    print("| op | threads | " + " | ".join(variants) + " |")
    print("| --- | --- |" + " --- |" * len(variants))
    benches = list(dict.fromkeys(x["bench"] for x in r["results"]))
    threads = sorted(set(x["threads"] for x in r["results"]))
    for b in benches:
        for t in threads:
            cells = []
            for v in variants:
                x = next((x for x in r["results"] if x["bench"] == b and x["threads"] == t and x["variant"] == v), None)
                cells.append("-" if x is None else f"{x['mops']:.2f} ({x.get('mops_cpu', 0):.2f})"
                             + ("*" if x.get("stopped_early") else ""))
            print(f"| {b} | {t} | " + " | ".join(cells) + " |")
    print("\nMops/s wall-clock (on-CPU in parentheses); * = stopped by --max-seconds (throughput over the operations done).\n")
    return r


def latency_table(r, t=1):
    print(f"Latency at {t} thread (ns, 10% of operations sampled):\n")
    print("| op | variant | p50 | p90 | p99 | p99.9 | p99.99 | p99.999 | max |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for b in ["lookup", "insert", "update", "scan"]:
        for x in r["results"]:
            if x["bench"] == b and x["threads"] == t and x.get("p50_ns") is not None:
                e = x
                print(f"| {b} | {x['variant']} | {e['p50_ns']:.0f} | {e['p90_ns']:.0f} | {e['p99_ns']:.0f} | "
                      f"{e['p999_ns']:.0f} | {e['p9999_ns']:.0f} | {e['p99999_ns']:.0f} | {e['max_ns']:.0f} |")
    print()


def memory_table(rs):
    print("Memory after loading (bytes per record) and persist costs of inserts:\n")
    print("| keys | variant | DRAM B/rec | PM B/rec | load s (on-CPU s) | barriers/insert (load) | lines/insert (load) | barriers/insert (run, 1t) | lines/insert (run, 1t) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, r in rs:
        if not r:
            continue
        seen = set()
        for x in r["results"]:
            v = x["variant"]
            if v in seen:
                continue
            seen.add(v)
            ins = next((y for y in r["results"] if y["variant"] == v and y["bench"] == "insert" and y["threads"] == 1), {})
            print(f"| {k} | {v} | {f(x.get('dram_B_per_rec'), 1)} | {f(x.get('pm_B_per_rec'), 1)} | "
                  f"{f(x.get('load_s'), 1)} ({f(x.get('load_cpu_s'), 1)}) | {f(x.get('load_fences_per_insert'))} | "
                  f"{f(x.get('load_lines_per_insert'))} | {f(ins.get('fences_per_op'))} | {f(ins.get('lines_per_op'))} |")
    for n, (d, p) in TABLE3.items():
        print(f"| 8 B (VLDB'22 Table 3, Optane) | {n} | {d * 1e9 / 1e8:.1f} | {p * 1e9 / 1e8:.1f} | - | - | - | - | - |")
    print()


def adapter_table():
    p = OUT / "adapter.jsonl"
    if not p.exists():
        return
    rows = [json.loads(l) for l in p.read_text().splitlines() if l.strip()]
    print("Through the PiBench adapter (`tree_api` via `dlopen`, tests/pibench_driver.cpp `bench` mode):\n")
    print("| op | threads | Mops/s | load s | hit rate |")
    print("| --- | --- | --- | --- | --- |")
    for x in rows:
        print(f"| {x['mix']} | {x['threads']} | {x['mops']:.2f} | {x['load_s']:.1f} | {x['hit_rate']:.3f} |")
    print()


if __name__ == "__main__":
    sec = sys.argv[2] if len(sys.argv) > 2 else "all"
    if sec in ("all", "peers"):
        peers_table()
    if sec in ("all", "8b"):
        compare_table("pibench-8b", "8-byte keys and values, 10 M records, 2 M operations per run")
    if sec in ("all", "latency") and load("pibench-8b"):
        latency_table(load("pibench-8b"), 1)
    if sec in ("all", "keys"):
        compare_table("pibench-k16", "16-byte string keys")
        compare_table("pibench-k64", "64-byte string keys")
    if sec in ("all", "memory"):
        memory_table([("8 B", load("pibench-8b")), ("16 B", load("pibench-k16")), ("64 B", load("pibench-k64"))])
    if sec in ("all", "adapter"):
        adapter_table()
