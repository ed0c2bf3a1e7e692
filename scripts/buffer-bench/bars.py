#!/usr/bin/env python3
"""The performance bars of the buffer manager (issue #10) from the JSON of a
`scripts/buffer-bench/run.sh OUT` run: one line per bar with the measured
value(s) and whether it holds, as a Markdown table.

Throughput ratios are wall-clock (the bar's terms), measured in one
invocation; beside them ("rq-free") the same ratio with each side's run-queue
delay taken out of its wall-clock time (`mops_rq_free`: the time the measuring
thread was runnable while another process had the CPU, from
/proc/thread-self/schedstat), an estimate for the same machine unshared that
keeps the time spent waiting for the SSD. The bar holds when the wall-clock
ratio meets it; "rq-free only" when only the estimate does.

Usage: bars.py OUT_DIR
"""
import json, os, sys

def load(out, group):
    p = os.path.join(out, group, "buffer.json")
    if not os.path.exists(p):
        return []
    return json.load(open(p))["results"]

def find(rs, exp, variant, bench, param=None):
    for r in rs:
        if r.get("experiment") == exp and r["variant"] == variant and r["bench"] == bench \
                and (param is None or r.get("param") == param):
            return r
    return None

def ratio(a, b, key="mops"):
    if not a or not b or not b.get(key) or a.get(key) is None:
        return None
    return a[key] / b[key]

def fmt(x, suffix="x"):
    return "-" if x is None else f"{x:.2f}{suffix}"

def both(a, b):
    """'W wall, R rq-free' and the two ratios."""
    w, q = ratio(a, b), ratio(a, b, "mops_rq_free")
    return f"{fmt(w)} wall, {fmt(q)} rq-free", w, q

def verdict(w, q, ok):
    if w is not None and ok(w):
        return "yes"
    if q is not None and ok(q):
        return "rq-free only"
    return "**no**"

def main():
    out = sys.argv[1]
    rows = []
    ycsb = load(out, "ycsb")
    tpcc = load(out, "tpcc")
    anchors = load(out, "anchors")
    mid = load(out, "mid")
    rebuild = load(out, "rebuild")
    PM_MIB, DRAM_MIB = 1280, 256

    def sweep_params(rs, exp):
        return sorted({r["param"] for r in rs if r.get("experiment") == exp})

    # 1. Beyond PM: YCSB-RO three-tier / ssd-bm >= 3.
    for p in sweep_params(ycsb, "ycsb"):
        tt = find(ycsb, "ycsb", "three-tier", "ycsb-ro", p)
        sb = find(ycsb, "ycsb", "ssd-bm", "ycsb-ro", p)
        if tt and tt["data_mib"] > PM_MIB and sb:
            t, w, q = both(tt, sb)
            rows.append((f"beyond PM ({tt['data_mib']:.0f} MiB): three-tier >= 3x ssd-bm, YCSB-RO",
                         f"{t} ({tt['mops']:.3f} vs {sb['mops']:.3f} Mops/s; load {tt.get('loadavg')}/{sb.get('loadavg')})",
                         verdict(w, q, lambda x: x >= 3)))
    # 2. Beyond PM: TPC-C >= 2.
    for p in sweep_params(tpcc, "tpcc"):
        tt = find(tpcc, "tpcc", "three-tier", "tpcc", p)
        sb = find(tpcc, "tpcc", "ssd-bm", "tpcc", p)
        if tt and tt["data_mib"] > PM_MIB and sb:
            t, w, q = both(tt, sb)
            rows.append((f"beyond PM ({p} warehouses, {tt['data_mib']:.0f} MiB): three-tier >= 2x ssd-bm, TPC-C",
                         f"{t} ({tt['tps']:.0f} vs {sb['tps']:.0f} tx/s; load {tt.get('loadavg')}/{sb.get('loadavg')})",
                         verdict(w, q, lambda x: x >= 2)))
    # 3. In DRAM: three-tier >= 0.8x main-memory on YCSB-RO (sweep and anchors runs).
    mix = load(out, "mix")
    for exp, rs in (("ycsb", ycsb), ("anchors", anchors), ("mix", mix)):
        for p in sweep_params(rs, exp):
            tt = find(rs, exp, "three-tier", "ycsb-ro", p)
            mm = find(rs, exp, "main-memory", "ycsb-ro", p)
            if tt and mm:
                t, w, q = both(tt, mm)
                rows.append((f"in DRAM ({tt['data_mib']:.0f} MiB, {exp} run): three-tier >= 0.8x main-memory, YCSB-RO",
                             t, verdict(w, q, lambda x: x >= 0.8)))
    # 4./5. Anchors.
    for p in sweep_params(anchors, "anchors"):
        for wl in ("ycsb-ro", "ycsb-rw50"):
            tt = find(anchors, "anchors", "three-tier", wl, p)
            if not tt:
                continue
            for e in ("lmdb", "sqlite"):
                a = find(anchors, "anchors", e, wl, p)
                if not a:
                    continue
                t, w, q = both(tt, a)
                inside = p * 1.0 < DRAM_MIB
                if inside and not (wl == "ycsb-ro" and e == "lmdb"):
                    continue
                need = 1.0 if inside else 2.0
                what = "in DRAM" if inside else "beyond the DRAM budget"
                rows.append((f"{what} ({p} MiB): three-tier >= {need:g}x {e} ({e} in a {a.get('cgroup_limit_mib')} MiB cgroup, peak {a.get('cgroup_peak_mib')} MiB), {wl}",
                             f"{t} ({tt['mops']:.3f} vs {a['mops']:.4f} Mops/s)",
                             verdict(w, q, lambda x: x >= need)))
    # 6. Between DRAM and PM: three-tier ahead of pm-direct.
    for exp, rs, bench in (("ycsb", ycsb, "ycsb-ro"), ("tpcc", tpcc, "tpcc")):
        for p in sweep_params(rs, exp):
            tt = find(rs, exp, "three-tier", bench, p)
            pd = find(rs, exp, "pm-direct", bench, p)
            if tt and pd and DRAM_MIB < tt["data_mib"] <= PM_MIB:
                t, w, q = both(tt, pd)
                rows.append((f"between DRAM and PM ({tt['data_mib']:.0f} MiB): three-tier > pm-direct, {bench}",
                             t, verdict(w, q, lambda x: x > 1)))
    tt = [r for r in mid if r.get("experiment") == "drilldown" and r["variant"] == "+admission-set" and r["bench"] == "ycsb-ro"]
    pd = [r for r in mid if r.get("experiment") == "drilldown" and r["variant"] == "pm-direct" and r["bench"] == "ycsb-ro"]
    if tt and pd:
        t, w, q = both(tt[0], pd[0])
        rows.append((f"between DRAM and PM ({tt[0]['data_mib']:.0f} MiB, drill-down run): three-tier > pm-direct, ycsb-ro",
                     t, verdict(w, q, lambda x: x > 1)))
    # 7. Wear.
    w = {r["variant"]: r for r in mid if r.get("experiment") == "wear"}
    if "three-tier" in w and "pm-direct" in w:
        a, b = w["three-tier"]["pm_line_writes_max"], w["pm-direct"]["pm_line_writes_max"]
        rows.append(("PM writes per line, update-heavy: three-tier max <= 1/5 of pm-direct's max",
                     f"{a} vs {b} (1/{b / max(a, 1):.0f}); total {w['three-tier']['pm_line_writes_total']} vs {w['pm-direct']['pm_line_writes_total']}",
                     "yes" if a * 5 <= b else "**no**"))
    # 8. Rebuild.
    rb = [r for r in rebuild if r.get("experiment") == "rebuild"]
    if rb:
        worst = max(r["page_table_rebuild_ms"] for r in rb)
        r0 = rb[0]
        rows.append((f"page-table rebuild, full PM tier ({r0['pages_mapped']} of {r0['pm_frames']} frames)",
                     f"{worst:.1f} ms (worst of {len(rb)}); whole restart {max(r['restart_total_ms'] for r in rb):.1f} ms",
                     "yes" if worst < 1000 else "**no**"))
    print("| bar | measured | holds? |")
    print("| --- | --- | --- |")
    for b, m, ok in rows:
        print(f"| {b} | {m} | {ok} |")

if __name__ == "__main__":
    main()
