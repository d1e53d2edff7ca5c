"""Doctor on a ledger another process holds the write lock of (readers still get through, so
reading shows nothing wrong) and on a damaged one (the exact commands, which really restore
it). Real SQLite files and a real second process holding the lock."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_dl.cli.doctor_cmd import _database, lock_holders
from slurm_dl.core.doctor import Facts, diagnose
from slurm_dl.core.doctor_store import SALVAGE_SED, damaged_fix, lock_writers
from slurm_dl.store import Store
from slurm_dl.store.schema import HEAD
from test_store_damage import _damage, _ledger_with_history

HOLD = (
    "import sqlite3, sys, time\n"
    "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "c.execute('BEGIN IMMEDIATE')\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


def facts(url: str) -> Facts:
    f = Facts(config_path="site.toml", database_url=url, now=1000.0, interval_s=3.0)
    _database(f, url)
    return f


def by_check(f: Facts, check: str):
    return next(x for x in diagnose(f) if x.check == check)


def test_a_held_write_lock_is_found_and_its_holder_named(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    Store(url).close()
    assert by_check(facts(url), "database writes").status == "ok"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        f = facts(url)
        assert f.db_error is None and f.db_revision == HEAD, "readers still get through"
        writes = by_check(f, "database writes")
        assert writes.status == "fail", writes
        assert f"{path}: database is locked: another process holds its write lock" in writes.detail
        assert "readers still get through" in writes.detail
        assert f"held by process {holder.pid} (" in writes.detail, writes.detail
        assert "python -c import sqlite3" in writes.detail, "its command (cut at 60 characters)"
        assert f"kill {holder.pid}" in writes.fix and "ROLLBACK" in writes.fix
        assert by_check(f, "database").status == "ok"
    finally:
        holder.kill()
        holder.wait()
    assert by_check(facts(url), "database writes").status == "ok", "the lock went with it"


def test_no_write_check_where_this_user_may_not_write(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    Store(url).close()
    monkeypatch.setattr("slurm_dl.cli.doctor_cmd.os.access", lambda p, mode: False)
    writes = by_check(facts(url), "database writes")
    assert writes.status == "skip" and "run doctor as root" in writes.detail


def test_lock_writers_reads_the_kernels_lock_table() -> None:
    db, shm = (0xFE, 0, 11), (0xFE, 0, 12)
    table = "\n".join(
        [
            "1: POSIX  ADVISORY  WRITE 101 fe:00:12 120 120",  # the WAL write lock
            "2: POSIX  ADVISORY  READ  102 fe:00:12 120 120",
            "3: POSIX  ADVISORY  WRITE 103 fe:00:12 128 128",  # a connection starting up
            "4: POSIX  ADVISORY  WRITE 104 fe:00:11 1073741825 1073741825",  # reserved (rollback)
            "5: -> POSIX  ADVISORY  WRITE 105 fe:00:12 120 120",  # waiting: holds nothing
            "6: POSIX  ADVISORY  WRITE 106 fe:00:99 120 120",  # another file
            "7: FLOCK  ADVISORY  WRITE 107 fe:00:11 0 EOF",
            "8: OFDLCK ADVISORY  WRITE -1 fe:00:12 120 120",  # no pid to name
            "9: POSIX  ADVISORY  WRITE 109 fe:00:12 0 EOF",
            "garbage",
        ]
    )
    assert lock_writers(table, [db], [shm]) == [101, 104, 109]
    assert lock_writers(table, [], []) == []


def test_lock_holders_reads_this_hosts_table(tmp_path: Path) -> None:
    assert lock_holders(str(tmp_path / "none.db")) == []
    assert lock_holders(str(tmp_path / "x.db"), locks=tmp_path / "no-such-table") == []


def test_the_fix_for_a_damaged_ledger_names_each_command_with_the_path(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    url = _ledger_with_history(path)
    _damage(path)
    f = facts(url)
    assert f.db_damaged and not f.db_locked
    db = by_check(f, "database")
    assert db.status == "fail" and db.fix == damaged_fix(str(path), f.db_owner)
    p = str(path)
    for part in (
        "systemctl stop slurm-dl-prioritizer",
        f"mv {p} {p}.damaged",
        f"{p}-wal, {p}-shm to {p}.damaged-wal, {p}.damaged-shm",
        f"install -m 0600 -o {f.db_owner} BACKUP {p}",
        f"sqlite3 {p}.damaged .dump | sed {SALVAGE_SED} | sqlite3 {p}; chown {f.db_owner} {p}",
        "slurm-dl doctor",
    ):
        assert part in db.fix, (part, db.fix)
    assert "USER" in damaged_fix("/x.db", None)


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 command")
def test_the_salvage_command_doctor_gives_gives_a_ledger_that_opens(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    url = _ledger_with_history(path)
    _damage(path)
    for suffix in ("", "-wal", "-shm"):  # as the fix says: set the file aside
        if Path(f"{path}{suffix}").exists():
            Path(f"{path}{suffix}").rename(f"{path}.damaged{suffix}")
    [salvage] = [c for c in damaged_fix(str(path), None).split("; ") if ".dump" in c]
    assert salvage.startswith("or, without one, salvage"), salvage
    command = salvage.split(": ", 1)[1]  # exactly the line doctor prints
    subprocess.run(command, shell=True, check=True, timeout=60)
    f = facts(url)
    assert f.db_error is None and f.db_revision == HEAD, f.db_error
    store = Store(url)
    assert store.last_cycle_at() is not None, "the cycles' ledger row survived"
    assert store.load_ledger() is not None
    store.close()
