"""Where a daemon's memory sits, from inside the process: Python's live objects, glibc's heap
(in use, and freed but kept), SQLite's own allocations.

RSS alone cannot tell a leak from a heap that keeps freed memory: a leak grows Python's
allocated blocks or the heap in use; fragmentation grows only the free-but-kept part. Each
reader returns None where the platform has no such figure (glibc's ``mallinfo2`` is 2.33+,
SQLite's counter needs the shared library), so callers need no platform checks.
"""

from __future__ import annotations

import ctypes
import sys
from functools import lru_cache


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


@lru_cache(maxsize=1)
def _libc():
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
        return libc
    except (OSError, AttributeError):
        return None


@lru_cache(maxsize=1)
def _sqlite():
    try:
        lib = ctypes.CDLL("libsqlite3.so.0")  # the library Python's sqlite3 module links
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        return lib
    except (OSError, AttributeError):
        return None


def python_blocks() -> int:
    """Memory blocks Python's allocator has handed out and not yet freed."""
    return sys.getallocatedblocks()


def malloc_bytes() -> tuple[int, int] | None:
    """glibc's heap: (bytes in use, bytes freed but kept by the allocator); None elsewhere.
    Counts every arena and the chunks ``mmap`` serves directly (as in use)."""
    libc = _libc()
    if libc is None:
        return None
    mi = libc.mallinfo2()
    return mi.uordblks + mi.hblkhd, mi.fordblks


def sqlite_bytes() -> int | None:
    """Memory SQLite holds (page caches, statements) in this process; None without the library."""
    lib = _sqlite()
    return None if lib is None else int(lib.sqlite3_memory_used())


def figures() -> dict[str, float | None]:
    """All of the above, in MiB (Python's in blocks)."""
    m = malloc_bytes()
    s = sqlite_bytes()
    return {"python_blocks": python_blocks(),
            "malloc_used_mib": None if m is None else round(m[0] / 2**20, 1),
            "malloc_free_mib": None if m is None else round(m[1] / 2**20, 1),
            "sqlite_mib": None if s is None else round(s / 2**20, 1)}
