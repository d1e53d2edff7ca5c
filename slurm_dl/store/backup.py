"""``slurm-dl db backup``: a consistent copy of a SQLite store while it may be in use.

Copying ``ledger.db`` with ``cp`` misses what is still in its write-ahead log (``-wal``), as
after a crash or while the daemon runs; SQLite's online backup reads the database as one
transaction, log included, into a new file.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

from ..core.database_url import shown_url, sqlite_path
from ..core.errors import StoreError


def backup_sqlite(url: str, dest: str | Path, timeout_s: float = 30.0) -> int:
    """Copy the SQLite store at ``url`` to the new file ``dest`` (0600, as the store is) with
    SQLite's backup API, then check the copy (``PRAGMA quick_check``). Returns its size in
    bytes. StoreError for another database, a missing store, an existing ``dest``, a damaged
    copy or any SQLite error; a failed copy is removed."""
    shown = shown_url(url)
    path = sqlite_path(url)
    if path is None:
        raise StoreError(
            f"database {shown}: db backup copies SQLite files; back up another\n"
            "  database with its own tools (PostgreSQL: pg_dump)"
        )
    if not path or not Path(path).is_file():
        raise StoreError(f"database {shown}: no such file to back up")
    dest = Path(dest)
    try:  # a new file, the store's own: it holds every user's jobs
        os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        raise StoreError(f"{dest} exists: name a new file (a backup never overwrites)") from None
    except OSError as e:
        raise StoreError(f"{dest}: cannot create it: {e.strerror or e}") from None
    try:
        with closing(sqlite3.connect(path, timeout=timeout_s)) as src:
            with closing(sqlite3.connect(dest)) as dst:
                src.backup(dst)
                dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        with closing(sqlite3.connect(f"file:{dest}?mode=ro", uri=True)) as check:
            rows = [r[0] for r in check.execute("PRAGMA quick_check(5)").fetchall()]
        if rows != ["ok"]:
            raise StoreError(f"{dest}: the copy fails its integrity check: {'; '.join(rows)}")
    except sqlite3.Error as e:
        dest.unlink(missing_ok=True)
        raise StoreError(f"database {shown}: backup failed: {e}") from None
    except StoreError:
        dest.unlink(missing_ok=True)
        raise
    return dest.stat().st_size
