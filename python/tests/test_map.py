"""The dict-like map, its ranges, batches, atomic updates and transactions,
checked against a dict; persistence across a reopen."""

import random
import threading

import pytest

import ferrite


def test_open_creates_and_reopens(pool_path):
    with ferrite.open(pool_path, 64 << 20) as db:
        assert db.durability == "emulated-pm-tmpfs"
        assert "process crash" in db.durability_description
        m = db.map("users")
        m["alice"] = "admin"
        m[b"bob"] = b"viewer"
    assert db.closed
    with ferrite.open(pool_path) as db:
        m = db.map("users")
        assert m["alice"] == b"admin"
        assert m[b"bob"] == b"viewer"
        assert len(m) == 2
        assert db.path == pool_path


def test_dict_semantics(db):
    m = db.map("m")
    assert len(m) == 0 and "k" not in m
    m["k"] = "v"
    assert m["k"] == b"v" and m[b"k"] == b"v" and "k" in m and b"k" in m
    m["k"] = bytearray(b"w")
    assert m.get("k") == b"w"
    assert m.get("nope") is None and m.get("nope", 7) == 7
    with pytest.raises(KeyError):
        m["nope"]
    with pytest.raises(KeyError):
        del m["nope"]
    del m["k"]
    assert "k" not in m
    # str keys are their UTF-8 bytes
    m["grüße"] = "✓"
    assert m["grüße".encode()] == "✓".encode()
    assert m.insert("x", "1") and not m.insert("x", "2")
    assert m.replace("x", "3") and not m.replace("y", "3")
    assert m.pop("x") == b"3" and m.pop("x", None) is None
    with pytest.raises(KeyError):
        m.pop("x")
    assert m.remove("grüße") and not m.remove("grüße")
    with pytest.raises(TypeError):
        m[1] = b"v"
    with pytest.raises(TypeError):
        m["k"] = 1.5


def test_iteration_and_ranges(db):
    m = db.map("r")
    for i in range(200):
        m[i.to_bytes(4, "big")] = str(i)
    keys = list(m)
    assert keys == [i.to_bytes(4, "big") for i in range(200)]
    assert list(m.values())[:3] == [b"0", b"1", b"2"]
    lo, hi = (10).to_bytes(4, "big"), (20).to_bytes(4, "big")
    assert [int.from_bytes(k, "big") for k, _ in m.range(lo, hi)] == list(range(10, 20))
    assert [int.from_bytes(k, "big") for k, _ in m.range(lo, hi, reverse=True)] == list(range(19, 9, -1))
    assert [int.from_bytes(k, "big") for k, _ in m.range(lo, hi, lo_inclusive=False, hi_inclusive=True)] == list(
        range(11, 21)
    )
    assert len(list(m.range(hi=lo))) == 10
    assert [int.from_bytes(k, "big") for k, _ in m.range(lo=(195).to_bytes(4, "big"))] == list(range(195, 200))
    assert m.count_range(lo, hi) == 10
    assert list(m.range(hi, lo)) == []


def test_against_a_dict_with_random_operations(db):
    m = db.map("model")
    model = {}
    rng = random.Random(7)
    for step in range(3000):
        k = f"key-{rng.randrange(300):04}".encode()
        v = bytes([rng.randrange(256)]) * rng.choice([0, 1, 8, 9, 100, 3000])
        op = rng.randrange(10)
        if op < 3:
            m[k] = v
            model[k] = v
        elif op < 4:
            assert m.insert(k, v) == (k not in model)
            model.setdefault(k, v)
        elif op < 5:
            if k in model:
                del m[k]
                del model[k]
            else:
                with pytest.raises(KeyError):
                    del m[k]
        elif op < 6:
            assert m.get(k) == model.get(k)
        elif op < 7:
            puts = {f"key-{rng.randrange(300):04}".encode(): v for _ in range(rng.randrange(5))}
            m.update(puts)
            model.update(puts)
        elif op < 8:
            want = model.get(k)
            expected = want if rng.randrange(2) else b"something else"
            ok = m.compare_and_swap(k, expected, v)
            assert ok == (expected == want)
            if ok:
                model[k] = v
        else:
            lo = f"key-{rng.randrange(300):04}".encode()
            hi = f"key-{rng.randrange(300):04}".encode()
            rev = bool(rng.randrange(2))
            want = sorted((kk, vv) for kk, vv in model.items() if lo <= kk < hi)
            if rev:
                want.reverse()
            assert list(m.range(lo, hi, reverse=rev)) == want, step
    assert dict(m.items()) == model
    assert len(m) == len(model)


def test_update_with_is_atomic_across_threads(db):
    m = db.map("counter")

    def bump(old):
        return str(int(old or b"0") + 1)

    def worker():
        for _ in range(300):
            m.update_with("n", bump)

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert m["n"] == b"1200"
    assert m.update_with("n", lambda old: None) is None
    assert "n" not in m
    with pytest.raises(ZeroDivisionError):
        m.update_with("n", lambda old: 1 / 0)


def test_transactions_commit_roll_back_and_isolate(db):
    m = db.map("bank")
    m.batch(puts={"alice": "100", "bob": "0"})
    with m.transaction() as t:
        a, b = int(t["alice"]), int(t["bob"])
        t["alice"], t["bob"] = str(a - 30), str(b + 30)
        assert m["alice"] == b"100"  # not visible before the commit
        assert t.range() == [(b"alice", b"70"), (b"bob", b"30")]
    assert (m["alice"], m["bob"]) == (b"70", b"30")
    with pytest.raises(RuntimeError):
        with m.transaction() as t:
            t["alice"] = "0"
            raise RuntimeError("abort")
    assert m["alice"] == b"70"
    t = m.transaction()
    t["carol"] = "5"
    t.rollback()
    assert "carol" not in m and not t.active
    with pytest.raises(ferrite.TransactionError):
        t["x"] = "y"
    # The database-level form binds to the first map it names.
    with db.transaction() as t:
        t["bank"]["dave"] = "1"
        with pytest.raises(ferrite.TransactionError):
            t["other"]
    assert m["dave"] == b"1"


def test_a_transaction_releases_the_gil_while_writers_wait(db):
    # A writer thread blocks on the map while this thread holds a
    # transaction; if it held the GIL while waiting, this thread could never
    # commit and the join below would time out.
    m = db.map("gil")
    t = m.transaction()
    t["k"] = "from the transaction"
    started = threading.Event()

    def writer():
        started.set()
        m["k"] = "from the writer"

    w = threading.Thread(target=writer)
    w.start()
    started.wait()
    assert t["k"] == b"from the transaction"
    t.commit()
    w.join(timeout=60)
    assert not w.is_alive()
    assert m["k"] == b"from the writer"


def test_writing_around_ones_own_transaction_raises(db):
    m = db.map("m")
    with m.transaction() as t:
        t["a"] = "1"
        with pytest.raises(ferrite.TransactionError):
            m["b"] = "2"
    assert m["a"] == b"1"


def test_volatile_maps_and_databases():
    db = ferrite.volatile()
    assert db.durability == "volatile" and db.path is None
    v = db.volatile_map()
    v["k"] = "v"
    assert v["k"] == b"v" and v.durability == "volatile"
    db.close()


def test_close_invalidates_everything(pool_path):
    db = ferrite.open(pool_path, 64 << 20)
    m = db.map("m")
    m["k"] = "v"
    it = iter(m)
    t = m.transaction()
    db.close()
    db.close()  # twice is fine
    for f in (lambda: m["k"], lambda: next(it), lambda: len(m), lambda: db.map("m")):
        with pytest.raises(ferrite.ClosedError):
            f()
    with pytest.raises(ferrite.TransactionError):
        t["x"] = "y"
    # The lock is released: the pool opens again, without the rolled-back write.
    with ferrite.open(pool_path) as db2:
        assert dict(db2.map("m").items()) == {b"k": b"v"}
