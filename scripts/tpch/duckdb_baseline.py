#!/usr/bin/env python3
"""Run the Elf benchmark's predicates in DuckDB on the same CSV: the outside baseline.

Input: the JSON file `ferrite bench elf --experiment tpch` writes
({"csv": path, "queries": [{"kind", "where_sql", "elf_count", "elf_ns"}]}).
Output (stdout, one JSON object): per query kind the DuckDB time per query, the
Elf time per query, and whether every count agreed.

DuckDB evaluates `SELECT count(*) FROM lineitem WHERE <predicate>` on a table
loaded into memory once (load time is excluded, as the Elf build is). Threads are
limited to the machine's cores (`--threads`).
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("queries", help="JSON file written by ferrite bench elf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="runs of the whole query set")
    a = ap.parse_args()
    import duckdb

    spec = json.load(open(a.queries))
    con = duckdb.connect()
    con.execute(f"SET threads={a.threads}")
    t = time.time()
    con.execute(f"CREATE TABLE lineitem AS SELECT * FROM read_csv_auto('{spec['csv']}', header=true)")
    load_s = time.time() - t
    kinds = {}
    mismatches = []
    for _ in range(a.repeat):
        for q in spec["queries"]:
            sql = f"SELECT count(*) FROM lineitem WHERE {q['where_sql']}"
            t0 = time.perf_counter_ns()
            n = con.execute(sql).fetchone()[0]
            dt = time.perf_counter_ns() - t0
            k = kinds.setdefault(q["kind"], {"n": 0, "duck_ns": 0, "elf_ns": 0, "agree": 0})
            k["n"] += 1
            k["duck_ns"] += dt
            k["elf_ns"] += q["elf_ns"]
            if n == q["elf_count"]:
                k["agree"] += 1
            elif len(mismatches) < 10:
                mismatches.append({"sql": sql, "duckdb": n, "elf": q["elf_count"]})
    out = {"load_s": load_s, "kinds": {}, "mismatches": mismatches}
    for name, k in kinds.items():
        out["kinds"][name] = {
            "queries": k["n"],
            "duckdb_ns_per_query": k["duck_ns"] / k["n"],
            "elf_ns_per_query": k["elf_ns"] / k["n"],
            "speedup": (k["duck_ns"] / max(k["elf_ns"], 1)),
            "counts_agree": k["agree"] == k["n"],
        }
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
