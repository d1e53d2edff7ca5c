"""``slurm-dl doctor``'s verdicts on the prioritizer's database and its last cycle (pure).

A SQLite store in WAL mode lets readers through while another process holds its write lock
(an ``sqlite3`` shell left inside a transaction, a second prioritizer): reading it shows nothing
wrong, yet no cycle can save. Doctor therefore also tries to start a write (rolled back at
once) and names the process holding the lock, read from the kernel's lock table
(:func:`lock_writers`); a damaged file gets the exact commands that restore or salvage it.
"""

from __future__ import annotations

import shlex
from typing import Any, Callable, Iterable

from .finding import Finding

WAL_WRITE_LOCK_BYTE = 120
"""SQLite's WAL write lock: byte 120 of the ``-shm`` file (the first of its lock bytes)."""


def stale_after(interval_s: float) -> float:
    """How old the last saved cycle may be before doctor calls it a problem: a few intervals
    (a cycle longer than its interval, and a second's jitter, still pass), at least 20 s."""
    return max(20.0, 4 * interval_s)


def lock_writers(
    locks: str,
    db_files: Iterable[tuple[int, int, int]],
    shm_files: Iterable[tuple[int, int, int]] = (),
) -> list[int]:
    """The processes holding a write lock, from the text of ``/proc/locks``: any write lock on
    one of ``db_files`` (an exclusive or reserved lock on the database itself), or SQLite's WAL
    write lock (the byte :data:`WAL_WRITE_LOCK_BYTE`) on one of ``shm_files``. Files are
    (device major, device minor, inode)."""
    dbs, shms = set(db_files), set(shm_files)
    pids: set[int] = set()
    for line in locks.splitlines():
        parts = line.split()
        if len(parts) < 8 or "->" in parts:  # a process waiting for a lock holds none
            continue
        kind, mode, pid, where, start, end = parts[1], parts[3], parts[4], parts[5], *parts[6:8]
        if kind not in ("POSIX", "OFDLCK") or mode != "WRITE":
            continue
        try:
            major, minor, inode = where.split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
            first, last = int(start), (None if end == "EOF" else int(end))
            pid_n = int(pid)
        except ValueError:
            continue
        if pid_n <= 0:
            continue
        if key in dbs or (
            key in shms
            and first <= WAL_WRITE_LOCK_BYTE
            and (last is None or last >= WAL_WRITE_LOCK_BYTE)
        ):
            pids.add(pid_n)
    return sorted(pids)


SALVAGE_SED = "'$s/^ROLLBACK;.*/COMMIT;/'"
"""``.dump`` of a damaged file ends with ``ROLLBACK; -- due to errors``: commit what it read.
(``.recover`` would read more, but Debian 12's sqlite3 3.40 fails it with "SQL logic error"
even on a sound file.)"""


def damaged_fix(path: str, owner: str | None) -> str:
    """What to run for a damaged SQLite ledger: set it aside, then restore a backup or salvage."""
    p, who = shlex.quote(path), shlex.quote(owner or "USER")
    aside = shlex.quote(path + ".damaged")
    return (
        f"stop the prioritizer (systemctl stop slurm-dl-prioritizer); set the file aside: mv {p} "
        f"{aside} (and {shlex.quote(path + '-wal')}, {shlex.quote(path + '-shm')} to "
        f"{shlex.quote(path + '.damaged-wal')}, {shlex.quote(path + '.damaged-shm')} where they "
        f"exist); restore the newest copy slurm-dl db backup made: install -m 0600 -o {who} "
        f"BACKUP {p}; or, without one, salvage what SQLite can still read (the sqlite3 command): "
        f"sqlite3 {aside} .dump | sed {SALVAGE_SED} | sqlite3 {p}; chown {who} {p}; chmod 0600 "
        f"{p}; then slurm-dl doctor, and start the prioritizer"
    )


def holders_words(holders: list[tuple[int, str, str]]) -> str:
    """'process 4242 (root): sqlite3 /var/lib/slurm-dl/ledger.db', for each holder."""
    return "; ".join(f"process {pid} ({user}): {cmd}" for pid, user, cmd in holders)


def lock_fix(path: str, holders: list[tuple[int, str, str]]) -> str:
    """How to free a write lock: end the holder's transaction or the holder."""
    if holders:
        pids = " ".join(str(pid) for pid, _, _ in holders)
        return (
            "end its transaction: in an sqlite3 shell, type ROLLBACK; (or .quit); a second prioritizer: "
            f"systemctl stop slurm-dl-prioritizer on its host; anything else: kill {pids}; "
            "then slurm-dl doctor"
        )
    files = " ".join(shlex.quote(path + s) for s in ("", "-wal", "-shm"))
    return (
        f"find the process as root: fuser -v {files} (or, where another host shares the "
        "file, look there); end its transaction (an sqlite3 shell: ROLLBACK;) or the "
        "process, then slurm-dl doctor"
    )


def database_findings(f: Any, add: Callable[[Finding], None]) -> None:
    """The store (reachable, not damaged, not locked, schema current) and the last cycle."""
    if f.db_error:
        if f.db_damaged and f.db_path:
            fix = damaged_fix(f.db_path, f.db_owner)
        elif f.db_locked and f.db_path:
            fix = lock_fix(f.db_path, f.db_lock_holders)
        else:
            fix = (
                "check [site] database_url (or --db) and that the database server is up; "
                "a first install: slurm-dl db upgrade creates the store"
            )
        detail = f.db_error
        if f.db_locked and f.db_lock_holders:
            detail += f"; held by {holders_words(f.db_lock_holders)}"
        add(Finding("database", "fail", detail, fix))
        return
    if f.db_revision != f.db_head:
        add(
            Finding(
                "database",
                "fail",
                f"{f.database_url}: schema {f.db_revision}, this release uses {f.db_head}",
                "stop the prioritizer, back up, then: slurm-dl db upgrade "
                + (
                    "(same --config or --db)"
                    if ":***@" in (f.database_url or "")
                    else f"--db '{f.database_url}'"
                ),
            )
        )
    else:
        add(Finding("database", "ok", f"{f.database_url} (schema {f.db_revision})"))
    _writes(f, add)
    if f.last_cycle_at is None:
        add(
            Finding(
                "prioritizer",
                "fail",
                "no cycle saved in the database yet",
                "systemctl start slurm-dl-prioritizer (or: slurm-dl prioritizer run)",
            )
        )
        return
    age = f.now - f.last_cycle_at
    if age > stale_after(f.interval_s):
        add(
            Finding(
                "prioritizer",
                "fail",
                f"last cycle {age:.0f} s ago, interval {f.interval_s:g} s: the daemon "
                "is down or its cycles fail",
                "systemctl status slurm-dl-prioritizer; journalctl -u slurm-dl-prioritizer",
            )
        )
    else:
        add(Finding("prioritizer", "ok", f"last cycle {age:.0f} s ago"))


def _writes(f: Any, add: Callable[[Finding], None]) -> None:
    """Whether a write could start: readers get past a held write lock, the cycles do not."""
    check = "database writes"
    if not f.db_path:
        return
    if f.db_write_skip:
        add(Finding(check, "skip", f.db_write_skip))
    elif f.db_write_error:
        who = (
            f"held by {holders_words(f.db_lock_holders)}"
            if f.db_lock_holders
            else "no process on this host holds it (another host sharing the file?)"
        )
        add(
            Finding(
                check,
                "fail",
                f"{f.db_write_error}: another process holds its write lock; readers still "
                f"get through, but no prioritizer cycle can save; {who}",
                lock_fix(f.db_path, f.db_lock_holders),
            )
        )
    else:
        add(Finding(check, "ok", f"{f.db_path}: no other process holds its write lock"))
