#!/usr/bin/env python3
"""Generate TPC-H lineitem as CSV (with a header row) using DuckDB's dbgen.

Works offline once the two wheels are installed:
    pip install duckdb==1.5.5 duckdb-extension-tpch==1.5.5
The tpch extension is loaded from the file shipped in the PyPI package, so no
network access is needed.

Usage: gen_lineitem.py --sf 1 --out /dev/shm/lineitem.csv
"""
import argparse
import os
import sys
import time


def tpch_extension_path():
    import duckdb_extension_tpch

    base = os.path.dirname(duckdb_extension_tpch.__file__)
    for root, _dirs, files in os.walk(base):
        for f in files:
            if f.endswith(".duckdb_extension"):
                return os.path.join(root, f)
    sys.exit("tpch.duckdb_extension not found in the duckdb-extension-tpch package")


def connect():
    import duckdb

    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{tpch_extension_path()}'")
    return con


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (1 = 6M rows)")
    ap.add_argument("--out", required=True, help="CSV file to write")
    a = ap.parse_args()
    con = connect()
    t = time.time()
    con.execute(f"CALL dbgen(sf={a.sf})")
    n = con.execute("SELECT count(*) FROM lineitem").fetchone()[0]
    con.execute(f"COPY lineitem TO '{a.out}' (HEADER, DELIMITER ',')")
    print(f"lineitem sf={a.sf}: {n} rows -> {a.out} in {time.time() - t:.1f}s")


if __name__ == "__main__":
    main()
