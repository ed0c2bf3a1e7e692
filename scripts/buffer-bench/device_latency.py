#!/usr/bin/env python3
"""Latency of the tiers behind `ferrite bench buffer` on this machine.

SSD tier: random page-sized reads with O_DIRECT from a file on the SSD
directory (default /tmp), one at a time (queue depth 1, as the single-threaded
buffer manager issues them), after the file was written and fdatasync'ed.
PM tier (emulated): copying one page and one cache line out of a file mapped
from the pool directory (default /dev/shm, i.e. DRAM).

Prints one JSON object. Usage:
  device_latency.py [--ssd-dir /tmp] [--pm-dir /dev/shm] [--mib 1024]
                    [--page 16384] [--reads 4000]
"""
import argparse, json, mmap, os, random, statistics, time

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round((len(v) - 1) * p)))]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ssd-dir", default="/tmp")
    ap.add_argument("--pm-dir", default="/dev/shm")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--page", type=int, default=16384)
    ap.add_argument("--reads", type=int, default=4000)
    a = ap.parse_args()
    size = a.mib << 20
    pages = size // a.page
    out = {"page_bytes": a.page, "file_mib": a.mib, "reads": a.reads,
           "loadavg_before": open("/proc/loadavg").read().split()[:3]}

    # SSD: write the file (O_DIRECT too, so it does not sit in the page cache).
    path = os.path.join(a.ssd_dir, f"ferrite-devlat-{os.getpid()}.dat")
    buf = mmap.mmap(-1, 1 << 20)
    buf.write(os.urandom(1 << 20))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
        t0 = time.perf_counter()
        for _ in range(size >> 20):
            os.write(fd, buf)
        os.fdatasync(fd)
        out["ssd_seq_write_mib_s"] = round(a.mib / (time.perf_counter() - t0), 1)
        page = mmap.mmap(-1, a.page)
        lat = []
        rng = random.Random(1)
        for _ in range(a.reads):
            off = rng.randrange(pages) * a.page
            t = time.perf_counter_ns()
            os.preadv(fd, [page], off)
            lat.append(time.perf_counter_ns() - t)
        out["ssd_read_us"] = {"mean": round(statistics.mean(lat) / 1e3, 1),
                              "p50": round(pct(lat, 0.5) / 1e3, 1),
                              "p99": round(pct(lat, 0.99) / 1e3, 1)}
        # Page writes with fdatasync (what a PM/DRAM eviction to SSD costs).
        wl = []
        for _ in range(min(a.reads, 500)):
            off = rng.randrange(pages) * a.page
            t = time.perf_counter_ns()
            os.pwritev(fd, [page], off)
            os.fdatasync(fd)
            wl.append(time.perf_counter_ns() - t)
        out["ssd_write_fdatasync_us"] = {"mean": round(statistics.mean(wl) / 1e3, 1),
                                         "p50": round(pct(wl, 0.5) / 1e3, 1),
                                         "p99": round(pct(wl, 0.99) / 1e3, 1)}
        os.close(fd)
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    # PM (emulated): copies out of a mapped file on the pool directory.
    ppath = os.path.join(a.pm_dir, f"ferrite-devlat-{os.getpid()}.pool")
    pm_mib = min(a.mib, 512)
    try:
        with open(ppath, "wb") as f:
            f.truncate(pm_mib << 20)
        fd = os.open(ppath, os.O_RDWR)
        m = mmap.mmap(fd, pm_mib << 20)
        for i in range(0, pm_mib << 20, 4096):
            m[i] = 1
        npages = (pm_mib << 20) // a.page
        rng = random.Random(2)
        n = a.reads * 10
        offs = [rng.randrange(npages) * a.page for _ in range(n)]
        t = time.perf_counter_ns()
        for o in offs:
            m[o:o + a.page]
        page_ns = (time.perf_counter_ns() - t) / n
        t = time.perf_counter_ns()
        for o in offs:
            m[o:o + 64]
        line_ns = (time.perf_counter_ns() - t) / n
        out["pm_copy_page_us"] = round(page_ns / 1e3, 2)
        out["pm_copy_line_us_incl_python"] = round(line_ns / 1e3, 2)
        m.close()
        os.close(fd)
    finally:
        os.unlink(ppath)
    out["ssd_read_vs_pm_page_copy"] = round(out["ssd_read_us"]["mean"] / out["pm_copy_page_us"], 1)
    out["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    print(json.dumps(out))

if __name__ == "__main__":
    main()
