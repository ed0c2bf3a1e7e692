#!/usr/bin/env python3
"""Markdown tables for docs/BENCHMARKS.md ("Buffer manager") from the JSON of
a `scripts/buffer-bench/run.sh OUT` run: each throughput as `wall (rq-free)`,
where rq-free is the same operations over wall-clock time less the measuring
thread's run-queue delay (see bars.py). Usage: tables.py OUT_DIR"""
import json, os, sys

DESIGNS = ["main-memory", "pm-direct", "basic-pm", "ssd-bm", "three-tier"]

def load(out, group):
    p = os.path.join(out, group, "buffer.json")
    return json.load(open(p))["results"] if os.path.exists(p) else []

def cell(r, unit=1.0, digits=3):
    if r is None:
        return "-"
    w = r["mops"] * unit
    q = r.get("mops_rq_free")
    s = f"{w:.{digits}f}"
    return s + (f" ({q * unit:.{digits}f})" if q else "")

def area(mib):
    return "DRAM" if mib <= 256 else "PM" if mib <= 1280 else "SSD"

def sweep(rs, exp, bench, unit, digits, label):
    params = sorted({r["param"] for r in rs if r.get("experiment") == exp})
    print(f"| {label} | data MiB | area | " + " | ".join(DESIGNS) + " |")
    print("| --- | --- | --- |" + " --- |" * len(DESIGNS))
    for p in params:
        row = {r["variant"]: r for r in rs if r.get("experiment") == exp and r["param"] == p and r["bench"] == bench}
        data = next(iter(row.values()))["data_mib"]
        print(f"| {p} | {data:.0f} | {area(data)} | " + " | ".join(cell(row.get(d), unit, digits) for d in DESIGNS) + " |")
    print()

def counters(rs, exp, keys):
    print("| cell | " + " | ".join(keys) + " |")
    print("| --- |" + " --- |" * len(keys))
    for r in rs:
        if r.get("experiment") != exp:
            continue
        print(f"| {r['variant']} {r['bench']} {r['param']} | " + " | ".join(str(r.get(k, "-")) for k in keys) + " |")
    print()

def main():
    out = sys.argv[1]
    y, t = load(out, "ycsb"), load(out, "tpcc")
    if y:
        print("### Fig. 8 table (Mops/s, wall (rq-free))\n")
        sweep(y, "ycsb", "ycsb-ro", 1.0, 3, "target MiB")
        counters(y, "ycsb", ["misses_per_op", "dram_lines_loaded_per_op", "pm_pages_loaded_per_op", "ssd_reads_per_op", "cpu_mops", "cpu_share", "loadavg"])
    if t:
        print("### Fig. 9 table (ktx/s, wall (rq-free))\n")
        sweep(t, "tpcc", "tpcc", 1000.0, 2, "warehouses")
        counters(t, "tpcc", ["misses_per_op", "dram_lines_loaded_per_op", "ssd_reads_per_op", "ssd_writes_per_op", "cpu_mops", "cpu_share", "loadavg"])
    m = load(out, "model")
    if m:
        print("### Modelled PM latency, Fig. 8 (Mops/s, wall (rq-free))\n")
        sweep(m, "ycsb", "ycsb-ro", 1.0, 3, "target MiB")
        counters(m, "ycsb", ["pm_model_lines_per_op", "pm_model_wait_ns_per_op", "misses_per_op", "cpu_mops", "loadavg"])
    for g, exp in (("mid", "drilldown"), ("model", "drilldown")):
        rs = [r for r in load(out, g) if r.get("experiment") == exp]
        if not rs:
            continue
        print(f"### Fig. 10 ({g}): RO and scans, wall (rq-free), vs basic-pm by rq-free\n")
        base = {b: next((r for r in rs if r["variant"] == "basic-pm" and r["bench"] == b), None) for b in ("ycsb-ro", "ycsb-scan")}
        print("| configuration | RO Mops/s | RO vs basic | PM lines->DRAM/op | scans/s | scans vs basic |")
        print("| --- | --- | --- | --- | --- | --- |")
        for v in dict.fromkeys(r["variant"] for r in rs):
            ro = next((r for r in rs if r["variant"] == v and r["bench"] == "ycsb-ro"), None)
            sc = next((r for r in rs if r["variant"] == v and r["bench"] == "ycsb-scan"), None)
            rel = lambda a, b: f"{a['mops_rq_free'] / b['mops_rq_free']:.2f}x" if a and b and a.get("mops_rq_free") and b.get("mops_rq_free") else "-"
            lines = ro.get("pm_lines_to_dram_per_op", "in place" if v == "pm-direct" else "-") if ro else "-"
            print(f"| {v} | {cell(ro)} | {rel(ro, base['ycsb-ro'])} | {lines} | {cell(sc, 1e6, 0)} | {rel(sc, base['ycsb-scan'])} |")
        print()
    mix = load(out, "mix")
    if mix:
        print("### Mix (wall (rq-free); TPC-C in ktx/s)\n")
        print("| workload | " + " | ".join(DESIGNS) + " |")
        print("| --- |" + " --- |" * len(DESIGNS))
        for b in dict.fromkeys(r["bench"] for r in mix):
            unit, dg = (1000.0, 2) if b == "tpcc" else (1.0, 3)
            row = {r["variant"]: r for r in mix if r["bench"] == b}
            print(f"| {b} | " + " | ".join(cell(row.get(d), unit, dg) for d in DESIGNS) + " |")
        print()
    mid = load(out, "mid")
    up = [r for r in mid if r.get("experiment") == "updates"]
    if up:
        print("### Fig. 15 (Mops/s, wall (rq-free))\n")
        vs = list(dict.fromkeys(r["variant"] for r in up))
        print("| updates | " + " | ".join(vs) + " | PM lines written per op (3T / PD / basic) | WAL bytes per op (3T / PD / basic) |")
        print("| --- |" + " --- |" * (len(vs) + 2))
        for p in sorted({r["param"] for r in up}):
            row = {r["variant"]: r for r in up if r["param"] == p}
            pl = " / ".join(str(row[v].get("pm_lines_written_per_op")) for v in vs)
            wb = " / ".join(f"{row[v].get('wal_bytes_per_op', 0):.0f}" for v in vs)
            print(f"| {p}% | " + " | ".join(cell(row.get(v)) for v in vs) + f" | {pl} | {wb} |")
        print()

if __name__ == "__main__":
    main()
