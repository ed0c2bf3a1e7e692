"""Ferrite: durable ordered maps and Elf tables in persistent memory.

Quick start::

    import ferrite

    with ferrite.open("/dev/shm/app.pool", 1 << 30) as db:  # creates it when absent
        users = db.map("users")             # the same map Rust's db.map("users") opens
        users["alice"] = "admin"            # str keys and values are stored as UTF-8
        assert users[b"alice"] == b"admin"  # values come back as bytes
        for key, value in users.range("a", "c"):
            print(key, value)
        with db.transaction() as t:         # all or nothing, also across a crash
            t["users"]["bob"] = "viewer"

Every acknowledged write is durable when the call returns, to the degree
``db.durability`` says ("pm": power loss; "emulated-pm-tmpfs" and
"emulated-pm-file": a process crash such as ``kill -9``; "volatile": nothing).
Calls that touch the pool release the GIL. One process at a time may open a
pool: a second gets ``InUseError``. Every error is a ``ferrite.Error``.
"""

from ._ferrite import (  # noqa: F401
    MAX_KEY,
    MAX_VALUE,
    ClosedError,
    CorruptError,
    Db,
    DbTransaction,
    ElfTable,
    Error,
    ExistsError,
    FileError,
    FormatError,
    InUseError,
    Map,
    NotFoundError,
    PoolFullError,
    Range,
    TooLargeError,
    Transaction,
    TransactionError,
    WrongTypeError,
    __version__,
    open,
    volatile,
)

__all__ = [
    "MAX_KEY",
    "MAX_VALUE",
    "ClosedError",
    "CorruptError",
    "Db",
    "DbTransaction",
    "ElfTable",
    "Error",
    "ExistsError",
    "FileError",
    "FormatError",
    "InUseError",
    "Map",
    "NotFoundError",
    "PoolFullError",
    "Range",
    "TooLargeError",
    "Transaction",
    "TransactionError",
    "WrongTypeError",
    "open",
    "volatile",
]
