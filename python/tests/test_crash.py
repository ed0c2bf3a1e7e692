"""kill -9 a Python process in the middle of its transactions, reopen, and
read back every acknowledged transaction whole (and nothing of a later one)."""

import signal
import subprocess
import sys
import textwrap

import ferrite

WRITER = textwrap.dedent(
    """
    import sys, ferrite
    db = ferrite.open(sys.argv[1], 256 << 20)
    m = db.map("txns")
    i = int(m.get("last", b"-1")) + 1
    while True:
        with m.transaction() as t:
            for part in "abc":
                t[f"txn:{i:08}:{part}"] = str(i)
            t["last"] = str(i)
        print("acked", i, flush=True)
        i += 1
    """
)


def ack(line, acked):
    """The transaction a whole "acked N" line acknowledges; a line the kill cut
    short acknowledges nothing."""
    parts = line.split()
    if line.endswith("\n") and len(parts) == 2 and parts[0] == "acked":
        return int(parts[1])
    return acked


def test_kill_9_then_reopen(pool_path):
    before = 0
    for round in range(3):
        w = subprocess.Popen([sys.executable, "-c", WRITER, pool_path], stdout=subprocess.PIPE, text=True)
        acked = -1
        while acked < before + 200:
            line = w.stdout.readline()
            assert line, "the writer ended early"
            acked = ack(line, acked)
        w.send_signal(signal.SIGKILL)
        w.wait()
        for line in w.stdout:
            acked = ack(line, acked)
        with ferrite.open(pool_path) as db:
            m = db.map("txns")
            last = int(m["last"])
            assert last in (acked, acked + 1), (last, acked)
            for i in range(last + 1):
                for part in "abc":
                    assert m[f"txn:{i:08}:{part}"] == str(i).encode()
            assert m.count_range(f"txn:{last + 1:08}:", "txn:~") == 0
            assert len(m) == 3 * (last + 1) + 1
        before = last + 1
