"""Where a daemon's memory sits, from inside the process: Python's live objects, glibc's heap
(in use, and freed but kept), SQLite's own allocations.

RSS alone cannot tell a leak from a heap that keeps freed memory: a leak grows Python's
allocated blocks or the heap in use; fragmentation grows only the free-but-kept part. Each
reader returns None where the platform has no such figure (glibc's ``mallinfo2`` is 2.33+,
SQLite's counter needs the shared library), so callers need no platform checks.

Where Python's objects come from: a daemon started with ``PYTHONTRACEMALLOC=N`` (Python then
records where each block was allocated, N frames deep, at some cost in speed and memory) and
``SLURM_DL_MEMORY_DIR=DIR`` writes a snapshot of its allocations to DIR on each ``SIGUSR1``
(:func:`snapshot_on_signal`); ``python -m slurm_dl.daemon.process_memory OLD NEW`` lists where the
blocks grew between two of them.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
import pickle
import signal
import sys
import threading
import tracemalloc
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)
MEMORY_DIR_ENV = "SLURM_DL_MEMORY_DIR"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


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
    return {
        "python_blocks": python_blocks(),
        "malloc_used_mib": None if m is None else round(m[0] / 2**20, 1),
        "malloc_free_mib": None if m is None else round(m[1] / 2**20, 1),
        "sqlite_mib": None if s is None else round(s / 2**20, 1),
    }


def snapshot_on_signal(name: str, signum: int = signal.SIGUSR1) -> Path | None:
    """When Python traces allocations and ``SLURM_DL_MEMORY_DIR`` names a directory, each
    ``signum`` writes ``<name>-<pid>-<n>.tracemalloc`` there (written whole, then renamed) and
    logs its path. Returns the directory, or None when either is missing (nothing installed)."""
    where = os.environ.get(MEMORY_DIR_ENV)
    if (
        not where
        or not tracemalloc.is_tracing()
        or threading.current_thread() is not threading.main_thread()
    ):
        return None
    directory = Path(where)
    count = itertools.count(1)

    def dump(_signum, _frame) -> None:
        path = directory / f"{name}-{os.getpid()}-{next(count)}.tracemalloc"
        part = path.with_suffix(".part")
        try:
            directory.mkdir(parents=True, exist_ok=True)
            tracemalloc.take_snapshot().dump(str(part))
            part.replace(path)
        except OSError as e:
            log.warning("memory snapshot not written to %s: %s", path, e)
            return
        log.info("memory snapshot written to %s", path)

    signal.signal(signum, dump)
    return directory


def growth(old: str | Path, new: str | Path, top: int = 15) -> list[str]:
    """Where Python's blocks grew from snapshot ``old`` to ``new`` (those of
    :func:`snapshot_on_signal`), largest first, one line each, 80 columns at most: size and
    block count differences, the allocating line, then the recorded lines that called it
    (``<``: called from)."""
    a = tracemalloc.Snapshot.load(str(old))
    b = tracemalloc.Snapshot.load(str(new))
    lines = []
    diffs = b.compare_to(a, "traceback")
    total = sum(d.size_diff for d in diffs)
    blocks = sum(d.count_diff for d in diffs)
    lines.append(f"total {total / 2**20:+.2f} MiB, {blocks:+,d} blocks")
    for d in diffs[:top]:
        frames = [
            f"{Path(f.filename).name}:{f.lineno}" for f in reversed(d.traceback)
        ]  # (oldest first)
        lines.append(
            f"{d.size_diff / 2**10:+9.1f} KiB {d.count_diff:+8,d}  {' < '.join(frames)}"[:80]
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(
            "usage: python -m slurm_dl.daemon.process_memory OLD.tracemalloc NEW.tracemalloc",
            file=sys.stderr,
        )
        return 2
    try:
        print("\n".join(growth(*args)))
    except (
        OSError,
        EOFError,
        ValueError,
        pickle.UnpicklingError,
    ) as e:  # missing, or not a snapshot
        print(f"error: cannot compare {args[0]} and {args[1]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
