#!/usr/bin/env python3
"""Check `ferrite elf query` against DuckDB on lineitem, as a new user would.

Build first:  ferrite elf build POOL --csv lineitem.csv
Then:         check_cli.py FERRITE POOL lineitem.csv
Compares counts for every predicate, and the TIDs themselves (DuckDB rowid =
0-based CSV data row) when fewer than 5000 rows match. Exit status = mismatches.
"""
import subprocess
import sys

import duckdb

F, P, CSV = sys.argv[1], sys.argv[2], sys.argv[3]
con = duckdb.connect()
con.execute("SET threads=2")
con.execute(f"CREATE TABLE li AS SELECT * FROM read_csv_auto('{CSV}', header=true)")
Q=[("l_shipdate=1994-01-01..1994-12-31,l_discount=0.05..0.07,l_quantity=..23","l_shipdate BETWEEN '1994-01-01' AND '1994-12-31' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity <= 23"),
("l_returnflag=R,l_linestatus=F","l_returnflag='R' AND l_linestatus='F'"),
("l_orderkey=1","l_orderkey=1"),
("l_shipmode=AIR..MAIL,l_receiptdate=1994-01-01..1994-03-31","l_shipmode BETWEEN 'AIR' AND 'MAIL' AND l_receiptdate BETWEEN '1994-01-01' AND '1994-03-31'"),
("l_partkey=1552,l_suppkey=93","l_partkey=1552 AND l_suppkey=93"),
("l_extendedprice=24710.35","l_extendedprice=24710.35"),
("l_shipinstruct=DELIVER IN PERSON,l_tax=0.02,l_linenumber=3..4","l_shipinstruct='DELIVER IN PERSON' AND l_tax=0.02 AND l_linenumber BETWEEN 3 AND 4"),
("l_comment=to beans x-ray carefull","l_comment='to beans x-ray carefull'"),
("l_orderkey=100000..100100,l_quantity=10..20","l_orderkey BETWEEN 100000 AND 100100 AND l_quantity BETWEEN 10 AND 20"),
("l_commitdate=1996-02-12","l_commitdate='1996-02-12'"),
]
bad=0
for w,sql in Q:
    c=int(subprocess.run([F,'elf','query',P,'--where',w,'--count'],capture_output=True,text=True).stdout)
    d=con.execute(f"SELECT count(*) FROM li WHERE {sql}").fetchone()[0]
    ok = c==d
    if c<5000:
        t=[int(x) for x in subprocess.run([F,'elf','query',P,'--where',w],capture_output=True,text=True).stdout.split()]
        dt=[r[0] for r in con.execute(f"SELECT rowid FROM li WHERE {sql} ORDER BY rowid").fetchall()]
        ok = ok and t==dt
    bad += not ok
    print(('OK ' if ok else 'BAD'), c, d, w)
sys.exit(bad)
