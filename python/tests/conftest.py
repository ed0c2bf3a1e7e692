"""Fixtures: pools in /dev/shm (emulated persistent memory), removed afterwards."""

import itertools
import os

import pytest

import ferrite

_n = itertools.count()


@pytest.fixture
def pool_path():
    path = f"/dev/shm/ferrite-pytest-{os.getpid()}-{next(_n)}.pool"
    if os.path.exists(path):
        os.remove(path)
    yield path
    if os.path.exists(path):
        os.remove(path)


@pytest.fixture
def db(pool_path):
    d = ferrite.open(pool_path, 64 << 20)
    yield d
    d.close()
