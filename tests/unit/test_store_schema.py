"""Schema versions of the store on SQLite: new databases at HEAD, the previous release's
database upgraded by ``slurm-dl db upgrade`` with nothing lost, refusals that name the fix.
(The same upgrade against a live PostgreSQL: tests/integration/test_store_postgres.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.store import Store
from slurm_dl.store.models import TABLES, metadata
from slurm_dl.store.schema import HEAD, SchemaError, upgrade

DATA = Path(__file__).resolve().parents[1] / "data"
LEGACY_DDL = (DATA / "store_schema_v0_sqlite.sql").read_text()

LEDGER = {
    "jobs": [],
    "accounts": [{"account": "vision", "usage_gpu_s": 1234.5, "updated_at": 100.0}],
    "history": [10.0, 20.0],
    "history_by_key": {},
    "revision": 3,
}


def legacy_rows(conn) -> None:
    """A little of everything the previous release wrote."""
    conn.execute(
        text("INSERT INTO sdl_ledger (id, data, saved_at, cycle) VALUES (1, :d, 100.0, 42)"),
        {"d": json.dumps(LEDGER)},
    )
    conn.execute(
        text(
            "INSERT INTO sdl_site_factor (job_id, value, pushed_at) VALUES (7, 500, 99.0), (8, -3, 99.5)"
        )
    )
    conn.execute(
        text(
            "INSERT INTO sdl_preemption (victim_job_id, need_job_id, state, signalled_at, "
            "restarts_at_signal, updated_at, reason) VALUES (7, 9, 'signalled', 90.0, 0, 91.0, 'r')"
        )
    )
    conn.execute(
        text(
            "INSERT INTO sdl_decision (at, job_id, kind, value, reason) VALUES "
            "(90.0, 7, 'preempt', 9, 'why'), (95.0, 8, 'priority', -3, 'score')"
        )
    )
    conn.execute(
        text("INSERT INTO sdl_explanations (id, at, data) VALUES (1, 100.0, :d)"),
        {"d": json.dumps({"7": {"job_id": 7, "score": 0.5}})},
    )
    conn.execute(
        text(
            "INSERT INTO sdl_job_utilisation (job_id, samples, util_sum, peak_util_percent, "
            "peak_gpu_mem_bytes, verdict, updated_at, gpu_seen) VALUES (7, 3, 150.0, 80.0, 1000, 'ok', "
            "99.0, '{}')"
        )
    )


def check_nothing_lost(store: Store) -> None:
    led = store.load_ledger()
    assert led.to_dict()["accounts"][0]["usage_gpu_s"] == 1234.5 and led.history == [10.0, 20.0]
    assert store.ledger_cycle() == 42
    assert store.site_factors() == {7: 500, 8: -3}
    rows = store.preemptions()
    assert [(r.victim_job_id, r.need_job_id, r.state, r.reason) for r in rows] == [
        (7, 9, "signalled", "r")
    ]
    assert [(d.kind, d.value) for d in store.decisions(7)] == [("preempt", 9)]
    assert store.explanation(7) == {"job_id": 7, "score": 0.5}
    assert store.utilisation_summaries()[7].samples == 3
    p = store.begin_preemption(8, 10, 120.0, 0, "after the upgrade")  # ids keep counting
    assert p == 2


def make_legacy_sqlite(path: Path) -> str:
    conn = sqlite3.connect(path)
    conn.executescript(LEGACY_DDL)
    conn.commit()
    conn.close()
    url = f"sqlite:///{path}"
    eng = create_engine(url)
    with eng.begin() as c:
        legacy_rows(c)
    eng.dispose()
    return url


def test_new_database_is_created_at_head(tmp_path: Path) -> None:
    s = Store(f"sqlite:///{tmp_path / 'new.db'}")
    assert s.revision == HEAD
    with s.engine.connect() as c:
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == HEAD


def test_migrations_build_exactly_the_models(tmp_path: Path) -> None:
    """From nothing through every migration == what the models create: the two cannot drift."""
    url = f"sqlite:///{tmp_path / 'migrated.db'}"
    eng = create_engine(url)
    before, after = upgrade(eng, url)
    assert (before, after) == (None, HEAD)
    with eng.connect() as c:
        diff = compare_metadata(MigrationContext.configure(c), metadata)
    assert [d for d in diff if d[0] != "remove_table"] == []
    assert {t.__tablename__ for t in TABLES} <= set(eng.dialect.get_table_names(eng.connect()))


def test_previous_release_database_is_refused_then_upgraded_losing_nothing(tmp_path: Path) -> None:
    url = make_legacy_sqlite(tmp_path / "old.db")
    with pytest.raises(SchemaError) as e:
        Store(url)
    assert "schema revision 0001 is older" in str(
        e.value
    ) and f"slurm-dl db upgrade --db '{url}'" in str(e.value)
    r = CliRunner().invoke(app, ["db", "status", "--db", url])
    assert r.exit_code == 1 and "slurm-dl db upgrade" in r.output
    r = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert r.exit_code == 0, r.output
    assert f"schema 0001 -> {HEAD}" in r.output
    check_nothing_lost(Store(url))
    with sqlite3.connect(tmp_path / "old.db") as c:
        idx = {n for (n,) in c.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"ix_sdl_decision_at", "ix_sdl_preemption_state"} <= idx
    r = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert r.exit_code == 0 and "already at schema" in r.output


def test_unknown_revision_is_refused_and_never_touched(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'future.db'}"
    Store(url).close()
    eng = create_engine(url)
    with eng.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(SchemaError, match="unknown to this slurm-dl"):
        Store(url)
    r = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert (
        r.exit_code != 0 and "unknown to this slurm-dl" in r.output and "Traceback" not in r.output
    )
    with eng.connect() as c:
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0099"


def test_the_daemon_refuses_an_old_schema_with_the_fix(tmp_path: Path) -> None:
    url = make_legacy_sqlite(tmp_path / "old.db")
    conf = Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml"
    r = CliRunner().invoke(app, ["prioritizer", "once", "--config", str(conf), "--db", url])
    assert r.exit_code != 0
    assert (
        r.output.startswith("error: ")
        and "slurm-dl db upgrade" in r.output
        and "Traceback" not in r.output
    )


CONF = Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml"


def _daemon(url: str) -> "subprocess.CompletedProcess[str]":
    # a subprocess: ``prioritizer run`` sets up the process's logging
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "prioritizer",
            "run",
            "--config",
            str(CONF),
            "--db",
            url,
            "--max-cycles",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_status_and_the_daemon_on_a_mistyped_sqlite_path_create_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ledgr.db"
    url = f"sqlite:///{path}"
    r = CliRunner().invoke(app, ["db", "status", "--db", url])
    assert r.exit_code == 1 and "no such file" in r.output and "db upgrade" in r.output, r.output
    d = _daemon(url)
    assert d.returncode == 1 and "no such file" in d.stderr and "Traceback" not in d.stderr, (
        d.stderr
    )
    once = CliRunner().invoke(
        app, ["prioritizer", "once", "--dry-run", "--config", str(CONF), "--db", url]
    )
    assert once.exit_code == 1 and "no such file" in once.output, once.output
    assert list(tmp_path.iterdir()) == []
    r = CliRunner().invoke(
        app, ["db", "status", "--db", f"sqlite:///{tmp_path / 'nodir' / 'x.db'}"]
    )
    assert r.exit_code == 1 and "no directory" in r.output and not (tmp_path / "nodir").exists()


def test_status_and_the_daemon_on_an_empty_database_leave_it_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()  # a file with no tables: a restore gone wrong, another program's
    url = f"sqlite:///{path}"
    r = CliRunner().invoke(app, ["db", "status", "--db", url])
    assert r.exit_code == 1 and "empty" in r.output and "db upgrade" in r.output, r.output
    d = _daemon(url)
    assert d.returncode == 1 and "empty" in d.stderr and "db upgrade" in d.stderr, d.stderr
    assert path.stat().st_size == 0
    r = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert r.exit_code == 0 and f"schema (new) -> {HEAD}" in r.output, r.output
    r = CliRunner().invoke(app, ["db", "status", "--db", url])
    assert r.exit_code == 0 and f"schema {HEAD} (current)" in r.output


def test_the_daemon_creates_the_store_on_a_first_start_with_init(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    d = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "prioritizer",
            "run",
            "--init",
            "--config",
            str(CONF),
            "--db",
            url,
            "--max-cycles",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": "/nonexistent"},
    )  # no Slurm: it stops after the store
    assert "empty" not in d.stderr and "no such file" not in d.stderr.split("Slurm")[0], d.stderr
    assert Store(url, create=False).revision == HEAD and not Store(url).created


def test_a_password_in_the_url_is_never_shown(tmp_path: Path) -> None:
    url = "postgresql+psycopg://slurmdl:Pa55-w0rd@127.0.0.1:1/slurmdl"  # nothing listens on port 1
    outs = [
        CliRunner().invoke(app, ["db", argv, "--db", url]).output for argv in ("status", "upgrade")
    ]
    outs.append(_daemon(url).stderr)
    for out in outs:
        assert out.startswith(
            "error: database postgresql+psycopg://slurmdl:***@127.0.0.1:1/slurmdl"
        ), out
        assert "Pa55-w0rd" not in out and "Traceback" not in out, out
