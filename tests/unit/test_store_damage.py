"""A damaged or locked ledger: doctor names the file and the cause; the daemon's loop logs each
failing cycle at ERROR and stops with exit code 1 after ``store_failures_max`` of them; a lock
is named as a lock. Real SQLite files, damaged the way a disk or a bad copy damages them."""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from contextlib import closing
from pathlib import Path

from prioritizer import Prioritizer
from prioritizer.loop import Loop
from slurm_dl.cli.doctor_cmd import _database
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.doctor import Facts, diagnose, stale_after
from slurm_dl.store import Store
from test_cycle import MemoryCluster

ROOT = Path(__file__).resolve().parents[2]


def _ledger_with_history(path: Path) -> str:
    """A store after 30 cycles of 40 jobs: several pages of tables and indexes."""
    url = f"sqlite:///{path}"
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    c = MemoryCluster(nodes=4)
    for j in range(1, 41):
        c.add(j, 1 + j % 4, running_on="gpu01" if j < 3 else None)
    p = Prioritizer(config, c, Store(url))
    for _ in range(30):
        c.now += 10
        p.run_cycle()
    p.store.close()
    return url


def _damage(path: Path) -> None:
    """Garbage over two pages of the cycle's data (a torn write, a bad copy); the pages that
    opening the store reads (the schema, the schema revision) survive, so the store still opens."""
    size = path.stat().st_size
    assert size >= 8 * 4096, size
    with closing(sqlite3.connect(path)) as con:  # which page holds what (SQLite's dbstat table)
        pages = [
            n
            for name, n in con.execute("SELECT name, pageno FROM dbstat ORDER BY pageno")
            if name in ("sdl_decision", "sdl_explanation_part")
        ]
    page = pages[len(pages) // 2]
    with open(path, "r+b") as f:
        f.seek((page - 1) * 4096)
        f.write(b"\xde\xad\xbe\xef" * 2048)


def _doctor_facts(url: str) -> Facts:
    f = Facts(database_url=url, db_head="0003", now=1000.0, interval_s=3.0)
    _database(f, url)
    return f


def test_doctor_fails_a_damaged_ledger_naming_the_file_and_the_cause(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    url = _ledger_with_history(path)
    assert _doctor_facts(url).db_error is None
    _damage(path)
    f = _doctor_facts(url)
    assert f.db_error and str(path) in f.db_error and "damaged" in f.db_error, f.db_error
    assert "restore it from a backup" in f.db_error
    db = next(x for x in diagnose(f) if x.check == "database")
    assert db.status == "fail" and str(path) in db.detail


def test_a_lock_is_named_as_a_lock(tmp_path: Path, caplog, monkeypatch) -> None:
    path = tmp_path / "ledger.db"
    url = _ledger_with_history(path)
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    c = MemoryCluster(nodes=4)
    c.add(1, 1)
    loop = Loop(Prioritizer(config, c, Store(url, busy_timeout_s=0.2)))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer: the daemon's cycle cannot save
    with caplog.at_level(logging.ERROR, logger="slurm_dl.prioritizer"):
        loop.tick()
    holder.execute("ROLLBACK")
    loop.prio.store.close()
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")  # one that shuts readers out too
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr("slurm_dl.cli.doctor_cmd.BUSY_TIMEOUT_S", 0.2)
    try:
        problem = _doctor_facts(url).db_error
    finally:
        holder.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "database is locked: another process holds a lock" in errors[0], (
        errors
    )
    assert str(path) in errors[0]
    assert problem and "database is locked: another process holds a lock" in problem, problem
    assert str(path) in problem


def test_the_daemon_stops_non_zero_after_the_bounded_failing_cycles(tmp_path: Path, caplog) -> None:
    path = tmp_path / "ledger.db"
    url = _ledger_with_history(path)
    _damage(path)
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    config = config.model_copy(
        update={"prioritizer": config.prioritizer.model_copy(update={"store_failures_max": 3})}
    )
    c = MemoryCluster(nodes=4)
    c.add(1, 1)
    loop = Loop(Prioritizer(config, c, Store(url)))
    with caplog.at_level(logging.ERROR, logger="slurm_dl.prioritizer"):
        for _ in range(3):
            loop.backoff.resume_at = 0.0  # the back-off has passed
            loop.tick()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 3 and loop.exit_code == 1, errors
    assert all("malformed" in e and "restore it from a backup" in e for e in errors), errors
    assert "3 cycles in a row" in errors[-1] and "stopping (exit 1)" in errors[-1]


def test_a_last_cycle_a_few_intervals_old_is_a_problem() -> None:
    f = Facts(
        config_path="x",
        database_url="sqlite:////x.db",
        db_revision="0003",
        db_head="0003",
        now=1000.0,
        interval_s=3.0,
        last_cycle_at=1000.0 - 44,
    )
    prio = next(x for x in diagnose(f) if x.check == "prioritizer")
    assert prio.status == "fail" and "44 s ago" in prio.detail and "journalctl" in prio.fix
    f = dataclasses.replace(f, last_cycle_at=1000.0 - 5)
    assert next(x for x in diagnose(f) if x.check == "prioritizer").status == "ok"
    assert stale_after(3.0) == 20.0 and stale_after(60.0) == 240.0
