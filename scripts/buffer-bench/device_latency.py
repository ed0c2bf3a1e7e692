#!/usr/bin/env python3
"""Latency of the SSD tier behind `ferrite bench buffer` on this machine:
random page-sized reads with O_DIRECT from a file in the SSD directory
(default /tmp), one at a time (queue depth 1, as the single-threaded buffer
manager issues them), after the file was written and fdatasync'ed; and
page writes each followed by fdatasync. (The PM tier's latency is that of
DRAM here, /dev/shm: `ferrite bench memory` measures it.)

Prints one JSON object. Usage:
  device_latency.py [--ssd-dir /tmp] [--mib 1024] [--page 16384] [--reads 4000]
"""
import argparse, json, mmap, os, random, statistics, time

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round((len(v) - 1) * p)))]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ssd-dir", default="/tmp")
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

    out["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    print(json.dumps(out))

if __name__ == "__main__":
    main()
