#!/usr/bin/env python3
"""Summarises a vldb22.sh results directory as markdown (stdout).

For every figure's `ferrite bench` report (<fig>.json): one row per run and
thread count, Mops/s of every index, the best peer that answered every
operation correctly, Ferrite's ratio to it, and Ferrite's ratio to the floor
measured on this machine (floor-memory.json / floor-persist.json). Cells of an
index that gave wrong answers are marked with the count (e.g. `0.52 ✗100000`)
and are never the "best peer". Then Table 3 (memory after the load), the tail
latencies (Fig. 6) and every wrong answer's first example.

Usage: summary.py RESULTS_DIR
"""
import json
import os
import sys

OURS = ("ferrite", "ferrite-dram")
BASELINES = ("btreemap", "btreemap-u64", "skiplist", "redb", "redb-nosync")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt(v):
    if v is None:
        return "-"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 0.1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def floor(d):
    """Ops/s bounds per operation kind from the floor reports, in Mops: the
    issue's floor (one read of the leaf; then one barrier), and the same with
    the route's miss before it (`route`: route-then-leaf, then one barrier)."""
    mem = load(os.path.join(d, "floor-memory.json"))
    per = load(os.path.join(d, "floor-persist.json"))
    if not mem or not per:
        return None, []
    read = next((r["mops"] for r in mem["results"] if r["bench"] == "dependent-read"
                 and r["variant"].startswith("pool") and r.get("param") == "uniform"), None)
    dram = next((r["mops"] for r in mem["results"] if r["bench"] == "dependent-read"
                 and r["variant"].startswith("dram-4k") and r.get("param") == "uniform"), None)
    route = next((r["mops"] for r in mem["results"] if r["bench"] == "route-then-leaf"
                  and r["variant"].startswith("pool")), None)
    persist = next((r["mops"] for r in per["results"] if r["bench"] == "random"
                    and r["variant"] == "clwb"), None)
    if not read or not persist:
        return None, []
    write = 1.0 / (1.0 / read + 1.0 / persist)
    f = {"lookup": read, "update": write, "insert": write}
    notes = [
        f"floor: one dependent random read of the pool {1e3 / read:.0f} ns "
        f"({fmt(read)} Mops/s; DRAM {1e3 / dram:.0f} ns), one persist barrier of a random line "
        f"(clwb + sfence) {1e3 / persist:.0f} ns: a lookup cannot beat one read ({fmt(read)} Mops/s), "
        f"an insert or update one read then one barrier ({fmt(write)} Mops/s); "
        f"`ferrite bench memory` and `ferrite bench persist`, same machine, same session."
    ]
    if route:
        route_write = 1.0 / (1.0 / route + 1.0 / persist)
        f["route"] = {"lookup": route, "update": route_write, "insert": route_write}
        notes.append(
            f"route floor: a random read of 16 MiB of DRAM (an inner node) then the leaf's "
            f"{1e3 / route:.0f} ns: a lookup whose lowest inner level misses the cache cannot beat "
            f"{fmt(route)} Mops/s, an insert or update {fmt(route_write)} Mops/s (column "
            f"\"ours / route floor\")."
        )
    seen = []
    for name, when in (("floor-cache.json", "before the figures"), ("floor-cache-after.json", "after them")):
        cache = load(os.path.join(d, name))
        if not cache:
            continue
        env_ = cache.get("environment", {})
        eff = env_.get("effective_cache_bytes_dram_huge_pages")
        llc = env_.get("reported_llc_bytes")
        seen.append((when, eff, llc))
    if seen:
        llc = next((x[2] for x in seen if x[2]), None)
        parts = [f"{eff / 2**20:.1f} MiB {when}" if eff else f"none {when}" for when, eff, _ in seen]
        notes.append(
            "cache: a dependent reader got " + ", ".join(parts)
            + " (`ferrite bench cache`: the largest region read in under half the DRAM latency)"
            + (f"; the CPU reports a {llc / 2**20:.0f} MiB last-level cache" if llc else "")
            + "."
        )
    return f, notes


def figure(d, stem, fl):
    r = load(os.path.join(d, stem + ".json"))
    if not r:
        return [f"*{stem}: no results*", ""]
    res = r["results"]
    names = []
    for x in res:
        if x["variant"] not in names:
            names.append(x["variant"])
    cells = []
    for x in res:
        c = (x["bench"], x["threads"])
        if c not in cells:
            cells.append(c)
    ours = [n for n in names if n in OURS]
    peers = [n for n in names if n not in OURS and n not in BASELINES]
    rounds = max((x.get("rounds", 1) for x in res), default=1)
    head = ["op", "t"] + names + ["best correct peer", "ours / best", "ours / best on-CPU", "ours / floor",
                                 "ours / route floor"] + (["ours / best, rounds min-max"] if rounds > 1 else [])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (b, t) in cells:
        row = [b, str(t)]
        got = {}
        per_round = {}
        for n in names:
            x = next((x for x in res if x["variant"] == n and x["bench"] == b and x["threads"] == t), None)
            if x is None:
                row.append("-")
                continue
            wrong = x.get("wrong", 0) or 0
            cpu = x.get("mops_cpu")
            got[n] = (x["mops"], cpu, wrong)
            per_round[n] = x.get("mops_rounds")
            row.append(fmt(x["mops"]) + (f" ({fmt(cpu)})" if cpu else "") + (f" ✗{wrong}" if wrong else ""))
        correct = [(got[n][0], n) for n in peers if n in got and got[n][2] == 0]
        correct_cpu = [(got[n][1], n) for n in peers if n in got and got[n][2] == 0 and got[n][1]]
        best = max(correct) if correct else None
        best_cpu = max(correct_cpu) if correct_cpu else None
        row.append(f"{best[1]} {fmt(best[0])}" if best else "none")
        o = next((got[n] for n in ours if n in got), None)
        row.append(f"{o[0] / best[0]:.2f}x" if (o and best) else "-")
        row.append(f"{o[1] / best_cpu[0]:.2f}x" if (o and o[1] and best_cpu) else "-")
        fk = fl.get(b) if fl else None
        row.append(f"{o[0] / fk:.2f}" if (o and fk and t == 1) else "-")
        rk = fl.get("route", {}).get(b) if fl else None
        row.append(f"{o[0] / rk:.2f}" if (o and rk and t == 1) else "-")
        if rounds > 1:
            on = next((n for n in ours if n in got), None)
            ok = [n for n in peers if n in got and got[n][2] == 0 and per_round.get(n)]
            ratios = []
            if on and per_round.get(on) and ok:
                for i, m in enumerate(per_round[on]):
                    bi = [per_round[n][i] for n in ok if i < len(per_round[n])]
                    if bi and max(bi) > 0:
                        ratios.append(m / max(bi))
            row.append(f"{min(ratios):.2f}-{max(ratios):.2f}x" if ratios else "-")
        out.append("| " + " | ".join(row) + " |")
    w = r.get("environment", {})
    out.append("")
    out.append("Cells: Mops/s wall clock (Mops per on-CPU second of a worker); ✗N: N wrong answers in that run.")
    if rounds > 1:
        out.append(f"Rounds: the comparison ran {rounds} times, the indexes in a rotated order; each cell is the "
                   "round with the median Mops/s (✗N sums every round's wrong answers); the last column is the "
                   "range of ours / best correct peer over the rounds, round by round.")
    out.append(f"Load average before/after: {w.get('loadavg_before', '?')} / {w.get('loadavg_after', '?')}; "
               f"workload: {w.get('workload', {}).get('description', '')}")
    out.append("")
    return out


def memory(d, stem):
    r = load(os.path.join(d, stem + ".json"))
    if not r:
        return []
    n = r["environment"].get("workload", {}).get("records", 0)
    out = ["| index | DRAM B/record | PM B/record | DRAM GB at 100 M | PM GB at 100 M | measured by |",
           "|---|---|---|---|---|---|"]
    seen = set()
    for x in r["results"]:
        v = x["variant"]
        if v in seen:
            continue
        seen.add(v)
        dr, pm = x.get("dram_B_per_rec"), x.get("pm_B_per_rec")
        g = lambda b: f"{b * 1e8 / 1e9:.2f}" if b is not None else "-"
        src = x.get('dram_source', '-')
        # A peer's DRAM is measured two ways (ferrite-bench peers::peer_dram): show both.
        parts = [(p, x.get(f"dram_{p}_bytes")) for p in ("rss_anon", "malloc")]
        if n and all(b is not None for _, b in parts):
            src += " (" + ", ".join(f"{p} {fmt(b / n)}" for p, b in parts) + ")"
        out.append(f"| {v} | {fmt(dr)} | {fmt(pm)} | {g(dr)} | {g(pm)} | "
                   f"{src} / {x.get('pm_source', '-')} |")
    out.append("")
    out.append(f"After loading {n:,} records.")
    out.append("")
    return out


def latency(d, stem):
    r = load(os.path.join(d, stem + ".json"))
    if not r:
        return []
    out = ["| op | index | p50 | p90 | p99 | p99.9 | p99.99 | max |", "|---|---|---|---|---|---|---|---|"]
    ns = lambda v: "-" if v is None else (f"{v / 1e3:.1f} µs" if v >= 1000 else f"{v:.0f} ns")
    for x in r["results"]:
        if x["threads"] != 1 or x.get("p50_ns") is None:
            continue
        out.append(f"| {x['bench']} | {x['variant']} | {ns(x.get('p50_ns'))} | {ns(x.get('p90_ns'))} | "
                   f"{ns(x.get('p99_ns'))} | {ns(x.get('p999_ns'))} | {ns(x.get('p9999_ns'))} | {ns(x.get('max_ns'))} |")
    out.append("")
    return out


def written(d, stem):
    """Fig. 9: bytes flushed to PM per operation (cache lines x 64)."""
    r = load(os.path.join(d, stem + ".json"))
    if not r:
        return []
    res = [x for x in r["results"] if x["threads"] == 1]
    names = []
    for x in res:
        if x["variant"] not in names:
            names.append(x["variant"])
    benches = []
    for x in res:
        if x["bench"] not in benches:
            benches.append(x["bench"])
    out = ["| index | " + " | ".join(f"{b} B/op" for b in benches) + " | load B/insert | counted by |",
           "|---|" + "---|" * (len(benches) + 2)]
    for n in names:
        row = [n]
        src = "-"
        load_l = None
        for b in benches:
            x = next((x for x in res if x["variant"] == n and x["bench"] == b), None)
            l = x.get("lines_per_op") if x else None
            row.append("not counted" if l is None else f"{l * 64:.0f}")
            if x:
                src = x.get("flush_source", src)
                load_l = x.get("load_lines_per_insert", load_l)
        row.append("-" if load_l is None else f"{load_l * 64:.0f}")
        row.append(src)
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    return out


PALETTE = ["#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]


def bars_svg(title, unit, groups, series, value):
    """A grouped bar chart (SVG text): one group per entry of `groups`, one
    bar per entry of `series` in each; value(group, series) -> float or None."""
    vals = [value(g, s) for g in groups for s in series]
    top = max([v for v in vals if v is not None] + [1e-9]) * 1.1
    w, h, left, bottom, right = 760, 420, 70, 360, 600
    gw = (right - left) / max(len(groups), 1)
    bw = gw * 0.8 / max(len(series), 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{(left + right) / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>',
           f'<text transform="translate(16,{bottom / 2 + 20}) rotate(-90)" text-anchor="middle">{unit}</text>']
    for i in range(6):
        y = bottom - (bottom - 40) * i / 5
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(top * i / 5)}</text>')
    for gi, g in enumerate(groups):
        x0 = left + gi * gw + gw * 0.1
        out.append(f'<text x="{left + gi * gw + gw / 2:.1f}" y="{bottom + 18}" text-anchor="middle">{g}</text>')
        for si, sname in enumerate(series):
            v = value(g, sname)
            if v is None:
                continue
            bh = (bottom - 40) * v / top
            out.append(f'<rect x="{x0 + si * bw:.1f}" y="{bottom - bh:.1f}" width="{bw * 0.9:.1f}" '
                       f'height="{bh:.1f}" fill="{PALETTE[si % len(PALETTE)]}"><title>{sname} {g}: {fmt(v)}</title></rect>')
    for si, sname in enumerate(series):
        y = 50 + si * 18
        out.append(f'<rect x="{right + 15}" y="{y - 10}" width="12" height="12" fill="{PALETTE[si % len(PALETTE)]}"/>'
                   f'<text x="{right + 32}" y="{y}">{sname}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def charts(d):
    """fig9-bytes.svg (Fig. 9) and table3-memory.svg (Table 3) beside the JSON."""
    r = load(os.path.join(d, "fig9.json"))
    if r:
        res = [x for x in r["results"] if x["threads"] == 1]
        names = list(dict.fromkeys(x["variant"] for x in res))
        benches = list(dict.fromkeys(x["bench"] for x in res))

        def v(b, n):
            x = next((x for x in res if x["variant"] == n and x["bench"] == b), None)
            return None if x is None or x.get("lines_per_op") is None else x["lines_per_op"] * 64
        with open(os.path.join(d, "fig9-bytes.svg"), "w") as f:
            f.write(bars_svg("Fig. 9: PM bytes flushed per operation, 1 thread", "bytes / operation",
                             benches, names, v))
    t3 = "table3" if os.path.exists(os.path.join(d, "table3.json")) else "fig2"
    r = load(os.path.join(d, t3 + ".json"))
    if r:
        firsts = {}
        for x in r["results"]:
            firsts.setdefault(x["variant"], x)
        names = list(firsts)

        def m(kind, n):
            key = {"DRAM": "dram_B_per_rec", "PM": "pm_B_per_rec"}[kind]
            return firsts[n].get(key)
        with open(os.path.join(d, "table3-memory.svg"), "w") as f:
            f.write(bars_svg("Table 3: bytes per record after the load", "bytes / record",
                             ["DRAM", "PM"], names, m))


def wrong(d, stems):
    out = []
    for s in stems:
        r = load(os.path.join(d, s + ".json"))
        if not r:
            continue
        for n in r.get("notes", []):
            if n.startswith("WRONG ANSWERS") or "died of signal" in n or "killed after" in n or "not run" in n:
                out.append(f"- {s}: {n}")
    return out


def main():
    d = sys.argv[1]
    charts(d)
    fl, fnotes = floor(d)
    stems = [s for s in ["fig2", "fig4skew", "fig5", "fig7-k16", "fig7-k64", "prefix-k16", "fig9", "fig10", "table3"]
             if os.path.exists(os.path.join(d, s + ".json"))]
    print(f"# VLDB'22 figures: results in {d}\n")
    for n in fnotes:
        print(n + "\n")
    for s in stems:
        if s in ("fig9", "table3"):
            continue  # counting builds / a memory measurement: no throughput table
        print(f"## {s}\n")
        print("\n".join(figure(d, s, fl)))
    t3 = "table3" if os.path.exists(os.path.join(d, "table3.json")) else "fig2"
    if os.path.exists(os.path.join(d, t3 + ".json")):
        print(f"## Table 3: memory after the load ({t3})\n")
        print("\n".join(memory(d, t3)))
    if "fig2" in stems:
        print("## Fig. 6: latency at 1 thread (fig2, 10% of operations timed)\n")
        print("\n".join(latency(d, "fig2")))
    if "fig9" in stems:
        print("## Fig. 9: PM bytes written (flushed) per operation, 1 thread\n")
        print("\n".join(written(d, "fig9")))
    if "fig10" in stems:
        print("## Fig. 10 memory after the load\n")
        print("\n".join(memory(d, "fig10")))
    w = wrong(d, stems)
    if w:
        print("## Wrong answers, crashes and peers not run\n")
        print("\n".join(w))
    runs = os.path.join(d, "runs.log")
    if os.path.exists(runs):
        print("\n## Runs\n")
        with open(runs) as f:
            for line in f:
                print("- " + line.strip())


if __name__ == "__main__":
    main()
