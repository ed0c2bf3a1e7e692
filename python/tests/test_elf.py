"""Elf tables: build, query for row ids (numpy arrays when numpy is there,
lists on request), count, insert, reopen."""

import pytest

import ferrite

SHIP = [10, 11, 10, 12, 10]
QTY = [5, 7, 8, 5, 20]


def test_queries_return_row_ids(db):
    t = db.create_elf("lineitem", [SHIP, QTY])
    assert (t.rows, t.columns, len(t)) == (5, 2, 5)
    ids = t.query({0: 10, 1: (0, 8)}, numpy=False)
    assert ids == [0, 2]
    assert t.count({0: 10}) == 3
    assert t.count() == 5
    assert t.insert([10, 1]) == 5
    assert t.query({0: 10, 1: (0, 8)}, numpy=False) == [0, 2, 5]
    with pytest.raises(ValueError):
        t.query({7: 1})
    with pytest.raises(TypeError):
        t.query({0: "x"})


def test_numpy_arrays_when_numpy_is_installed(db):
    np = pytest.importorskip("numpy")
    t = db.create_elf("t", [SHIP, QTY])
    ids = t.query({0: (10, 11)})
    assert isinstance(ids, np.ndarray) and ids.dtype == np.uint32
    assert ids.tolist() == [0, 1, 2, 4]
    assert isinstance(t.query({0: 10}, numpy=True), np.ndarray)


def test_tables_survive_a_reopen(pool_path):
    with ferrite.open(pool_path, 64 << 20) as db:
        db.create_elf("t", [SHIP, QTY]).insert([99, 99])
    with ferrite.open(pool_path) as db:
        t = db.elf("t")
        assert t.rows == 6
        assert t.query({0: 99}, numpy=False) == [5]
