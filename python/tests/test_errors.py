"""Every failure is a ferrite.Error subclass with a clear message, never a
crash: in use by another process, too large, wrong type, not a pool, missing
file, a name that is taken or absent, a full pool."""

import os
import subprocess
import sys
import textwrap

import pytest

import ferrite


def test_the_hierarchy():
    for e in (
        ferrite.InUseError,
        ferrite.PoolFullError,
        ferrite.TooLargeError,
        ferrite.WrongTypeError,
        ferrite.FormatError,
        ferrite.CorruptError,
        ferrite.NotFoundError,
        ferrite.ExistsError,
        ferrite.TransactionError,
        ferrite.ClosedError,
        ferrite.FileError,
    ):
        assert issubclass(e, ferrite.Error) and issubclass(e, Exception)


HOLDER = textwrap.dedent(
    """
    import sys, ferrite
    db = ferrite.open(sys.argv[1], 64 << 20)
    db.map("m")["k"] = "v"
    print("holding", flush=True)
    sys.stdin.read()
    db.close()
    """
)


def test_a_second_process_gets_in_use(pool_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, pool_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(ferrite.InUseError) as e:
            ferrite.open(pool_path)
        assert "in use by another process" in str(e.value)
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    with ferrite.open(pool_path) as db:
        assert db.map("m")["k"] == b"v"


def test_limits(db):
    m = db.map("m")
    with pytest.raises(ferrite.TooLargeError, match="exceeds the limit of 1024"):
        m[b"k" * (ferrite.MAX_KEY + 1)] = b"v"
    with pytest.raises(ferrite.TooLargeError):
        m["k"] = b"v" * (ferrite.MAX_VALUE + 1)
    m[b"k" * ferrite.MAX_KEY] = b"v" * ferrite.MAX_VALUE
    assert len(m[b"k" * ferrite.MAX_KEY]) == ferrite.MAX_VALUE


def test_names(db):
    db.create_elf("table", [[1, 2, 3]])
    with pytest.raises(ferrite.WrongTypeError):
        db.map("table")
    with pytest.raises(ferrite.ExistsError):
        db.create_elf("table", [[1]])
    with pytest.raises(ferrite.NotFoundError):
        db.elf("nope")
    with pytest.raises(ValueError):
        db.map("")


def test_files(pool_path, tmp_path):
    with open(pool_path, "wb") as f:
        f.write(b"\0" * (1 << 20))
    with pytest.raises(ferrite.FormatError, match="not a Ferrite pool"):
        ferrite.open(pool_path)
    os.remove(pool_path)
    with pytest.raises(ferrite.FileError):
        ferrite.open(str(tmp_path / "no" / "such" / "dir" / "x.pool"))


def test_a_full_pool(pool_path):
    with ferrite.open(pool_path, 16 << 20) as db:
        m = db.map("m")
        n = 0
        with pytest.raises(ferrite.PoolFullError):
            while True:
                m[n.to_bytes(8, "big")] = b"x" * 4000
                n += 1
        assert len(m) == n and n > 1000
        assert m[(n - 1).to_bytes(8, "big")] == b"x" * 4000
