#!/usr/bin/env python3
"""Extra SVG charts for docs/BENCHMARKS.md ("Buffer manager") from the JSON of
a `scripts/buffer-bench/run.sh OUT` run, beside the ones `ferrite bench
buffer` draws: Figs. 8 and 9 with the run-queue-free throughput (see bars.py)
and the page-table rebuild. Usage: charts.py OUT_DIR IMG_DIR"""
import json, math, os, sys

COLORS = {"main-memory": "#1f77b4", "pm-direct": "#ff7f0e", "basic-pm": "#2ca02c",
          "ssd-bm": "#9467bd", "three-tier": "#d62728"}
W, H, L, R, T, B = 640, 360, 70, 150, 40, 50

def load(out, group):
    p = os.path.join(out, group, "buffer.json")
    return json.load(open(p))["results"] if os.path.exists(p) else []

def line_chart(title, xlabel, ylabel, series, marks, path):
    xs = [x for s in series.values() for x, _ in s] + [m for _, m in marks]
    ys = [y for s in series.values() for _, y in s if y > 0]
    x0, x1 = 0, max(xs) * 1.05
    y0, y1 = math.log10(min(ys) / 1.5), math.log10(max(ys) * 1.5)
    px = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
    py = lambda y: T + (y1 - math.log10(y)) / (y1 - y0) * (H - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
         f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
         f'<text x="{(L+W-R)/2}" y="{H-12}" text-anchor="middle">{xlabel}</text>',
         f'<text x="16" y="{(T+H-B)/2}" text-anchor="middle" transform="rotate(-90 16 {(T+H-B)/2})">{ylabel} (log)</text>']
    for e in range(math.floor(y0), math.ceil(y1) + 1):
        for m in (1, 2, 5):
            v = m * 10 ** e
            if y0 <= math.log10(v) <= y1:
                o.append(f'<line x1="{L}" y1="{py(v):.1f}" x2="{W-R}" y2="{py(v):.1f}" stroke="#ddd"/>')
                o.append(f'<text x="{L-4}" y="{py(v)+4:.1f}" text-anchor="end">{v:g}</text>')
    for x in sorted({x for s in series.values() for x, _ in s}):
        o.append(f'<text x="{px(x):.1f}" y="{H-B+14}" text-anchor="middle">{x:g}</text>')
    for name, m in marks:
        o.append(f'<line x1="{px(m):.1f}" y1="{T}" x2="{px(m):.1f}" y2="{H-B}" stroke="gray" stroke-dasharray="4 3"/>')
        o.append(f'<text x="{px(m)+3:.1f}" y="{T+10}" fill="gray">{name}</text>')
    for i, (name, pts) in enumerate(series.items()):
        c = COLORS.get(name, "black")
        pts = sorted(p for p in pts if p[1] > 0)
        o.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (
            c, " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)))
        for x, y in pts:
            o.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>')
        o.append(f'<rect x="{W-R+10}" y="{T+i*16}" width="12" height="3" fill="{c}"/>')
        o.append(f'<text x="{W-R+26}" y="{T+i*16+5}">{name}</text>')
    o.append("</svg>")
    open(path, "w").write("\n".join(o))

def bar_chart(title, ylabel, bars, limit, path):
    top = max([v for _, v in bars] + [limit or 0]) * 1.15
    bw = (W - L - R) / len(bars)
    py = lambda v: T + (1 - v / top) * (H - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
         f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
         f'<text x="16" y="{(T+H-B)/2}" text-anchor="middle" transform="rotate(-90 16 {(T+H-B)/2})">{ylabel}</text>']
    for k in range(6):
        v = top * k / 5
        o.append(f'<text x="{L-4}" y="{py(v)+4:.1f}" text-anchor="end">{v:.0f}</text>')
    for i, (name, v) in enumerate(bars):
        x = L + i * bw + bw * 0.15
        o.append(f'<rect x="{x:.1f}" y="{py(v):.1f}" width="{bw*0.7:.1f}" height="{H-B-py(v):.1f}" fill="#d62728"/>')
        o.append(f'<text x="{x+bw*0.35:.1f}" y="{py(v)-4:.1f}" text-anchor="middle">{v:.1f}</text>')
        o.append(f'<text x="{x+bw*0.35:.1f}" y="{H-B+14}" text-anchor="middle">{name}</text>')
    if limit:
        o.append(f'<line x1="{L}" y1="{py(limit):.1f}" x2="{W-R}" y2="{py(limit):.1f}" stroke="gray" stroke-dasharray="4 3"/>')
        o.append(f'<text x="{W-R+4}" y="{py(limit)+4:.1f}" fill="gray">bar: {limit:g} ms</text>')
    o.append("</svg>")
    open(path, "w").write("\n".join(o))

def sweep_series(rs, exp, bench, key, unit, xkey):
    s = {}
    for r in rs:
        if r.get("experiment") == exp and r["bench"] == bench and r.get(key):
            x = r["data_mib"] if xkey == "data" else r["param"]
            s.setdefault(r["variant"], []).append((x, r[key] * unit))
    return {d: s[d] for d in COLORS if d in s}

def main():
    out, img = sys.argv[1], sys.argv[2]
    y = load(out, "ycsb")
    if y:
        line_chart("YCSB-RO over data size, run-queue-free (thesis Fig. 8)", "data size (MiB)", "Mops/s",
                   sweep_series(y, "ycsb", "ycsb-ro", "mops_rq_free", 1, "data"),
                   [("DRAM", 256), ("PM", 1280)], os.path.join(img, "buffer-fig8-rqfree.svg"))
    t = load(out, "tpcc")
    if t:
        line_chart("TPC-C over warehouses, run-queue-free (thesis Fig. 9)", "warehouses", "ktx/s",
                   sweep_series(t, "tpcc", "tpcc", "mops_rq_free", 1000, "param"),
                   [], os.path.join(img, "buffer-fig9-rqfree.svg"))
    m = load(out, "model")
    if m:
        line_chart("YCSB-RO, MODELLED PM read latency 300 ns, run-queue-free", "data size (MiB)", "Mops/s",
                   sweep_series(m, "ycsb", "ycsb-ro", "mops_rq_free", 1, "data"),
                   [("DRAM", 256), ("PM", 1280)], os.path.join(img, "buffer-fig8-model.svg"))
    rb = [r for r in load(out, "rebuild") if r.get("experiment") == "rebuild"]
    if rb:
        bars = []
        for r in rb:
            bars.append((f"#{r['param']} table", r["page_table_rebuild_ms"]))
            bars.append((f"#{r['param']} restart", r["restart_total_ms"]))
        bar_chart(f"Page-table rebuild from a full PM tier ({rb[0]['pages_mapped']} pages)", "ms", bars, None,
                  os.path.join(img, "buffer-rebuild.svg"))

if __name__ == "__main__":
    main()
