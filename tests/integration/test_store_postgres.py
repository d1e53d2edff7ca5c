"""The store against a live PostgreSQL server (pgserver.PgServer: initdb + pg_ctl in a temp dir).

- the store's contract suite (tests/unit/test_store.py, every test) with ``store`` on PostgreSQL;
- the previous release's tables with data, refused by the daemon, upgraded by
  ``slurm-dl db upgrade``, nothing lost;
- an empty database: ``db status`` and the daemon (without ``--init``) refuse it, create nothing;
- the prioritizer daemon with its store on PostgreSQL runs the preemption scenario on the testbed,
  its URL carrying a password that no output shows (log, doctor, db status, db upgrade).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

import test_prioritizer as tp
from slurm_dl.cli.main import app
from slurm_dl.store import Store
from slurm_dl.store.schema import HEAD, SchemaError
from slurm_dl.testbed import submit

UNIT = Path(__file__).resolve().parents[1] / "unit"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_pg_{name}", UNIT / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_contract = _load("test_store")
_schema = _load("test_store_schema")
# The contract suite, collected here again: same test bodies, ``store`` below is PostgreSQL.
globals().update({k: v for k, v in vars(_contract).items() if k.startswith("test_")})


@pytest.fixture
def store(pg) -> Iterator[Store]:
    s = Store(pg.create_db())
    assert s.engine.dialect.name == "postgresql"
    yield s
    s.close()


def test_previous_release_database_upgraded_on_postgres(pg) -> None:
    from slurm_dl.store.migrations.versions.r0001_baseline import tables

    url = pg.create_db("legacy")
    eng = sa.create_engine(url)
    meta = sa.MetaData()
    tables(meta)
    with eng.begin() as c:  # what the previous release's create_all made: no alembic_version
        meta.create_all(c)
        _schema.legacy_rows(c)
    with pytest.raises(SchemaError, match="slurm-dl db upgrade"):
        Store(url)
    r = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert r.exit_code == 0, r.output
    assert f"0001 -> {HEAD}" in r.output
    _schema.check_nothing_lost(Store(url))
    with eng.connect() as c:
        idx = {i["name"] for i in sa.inspect(c).get_indexes("sdl_decision")}
    assert "ix_sdl_decision_at" in idx
    eng.dispose()


PASSWORD = "Sdl-s3cret-pw"  # the test server trusts local connections: any password is taken


def _with_password(url: str) -> str:
    return url.replace("://postgres@", f"://postgres:{PASSWORD}@", 1)


def test_an_empty_postgres_database_is_reported_and_left_empty(pg) -> None:
    url = _with_password(pg.create_db("empty"))
    conf = Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml"
    runner = CliRunner()
    r = runner.invoke(app, ["db", "status", "--db", url])
    assert r.exit_code == 1 and "empty" in r.output and "db upgrade" in r.output, r.output
    r2 = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "prioritizer",
            "run",
            "--config",
            str(conf),
            "--db",
            url,
            "--max-cycles",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r2.returncode == 1 and "empty" in r2.stderr and "db upgrade" in r2.stderr, r2.stderr
    eng = sa.create_engine(url)
    with eng.connect() as c:
        assert sa.inspect(c).get_table_names() == []  # psql's \dt: no relations
    r3 = runner.invoke(app, ["db", "upgrade", "--db", url])
    assert r3.exit_code == 0 and f"schema (new) -> {HEAD}" in r3.output, r3.output
    r4 = runner.invoke(app, ["db", "status", "--db", url])
    assert r4.exit_code == 0 and "(current)" in r4.output
    for out in (r.output, r2.stderr, r3.output, r4.output):
        assert PASSWORD not in out and "postgres:***@" in out, out
    eng.dispose()


def test_prioritizer_on_postgres_runs_the_preemption_scenario(pg, testbed, tmp_path: Path) -> None:
    env = testbed.env()
    out, ckpt = tmp_path / "victim.out", tmp_path / "victim.ckpt"
    nodes = len(testbed.status().nodes)
    victim = submit(
        tp.VICTIM.format(ckpt=ckpt),
        env,
        [
            "--requeue",
            "--comment=dl:ckpt=1",
            f"-N{nodes}",
            "--gres=gpu:8",
            "--time=20",
            f"--output={out}",
            "--open-mode=append",
        ],
    )
    tp.wait_until("the long job to run", lambda: tp._state(victim, env) == "RUNNING", 60)
    short = submit(
        "#!/bin/bash\necho short ran\nsleep 3\n",
        env,
        ["--gres=gpu:1", "--time=5", f"--output={tmp_path / 'short.out'}"],
    )
    url = _with_password(pg.create_db("prio"))
    daemon = tp.Daemon(env, url, tmp_path / "daemon.log").start()
    try:
        tp.wait_until(
            "USR2 in the long job's output",
            lambda: "USR2" in (out.read_text() if out.exists() else ""),
            90,
        )
        tp.wait_until("the long job to be requeued", lambda: tp._restarts(victim, env) >= 1, 90)
        tp.wait_until(
            "the short job to run",
            lambda: tp._state(short, env) in ("RUNNING", "COMPLETING", "COMPLETED"),
            60,
        )
        time.sleep(1)
    finally:
        daemon.stop()
        tp._cancel(env, victim, short)
    store = Store(url)
    assert store.engine.dialect.name == "postgresql"
    rows = [(r.victim_job_id, r.need_job_id, r.state) for r in store.preemptions()]
    assert (victim, short, "requeued") in rows, (rows, daemon.text()[-2000:])
    assert store.ledger_cycle() >= 2 and store.load_ledger().attained(victim) > 0
    assert any(d.kind == "preempt" for d in store.decisions(victim))
    shown = [daemon.text()]
    for argv in (
        ["doctor", "--db", url],
        ["db", "status", "--db", url],
        ["db", "upgrade", "--db", url],
    ):
        r = subprocess.run(
            [sys.executable, "-m", "slurm_dl.cli.main", *argv],
            env={**env, "SLURM_DL_CONFIG": str(tp.TESTBED_TOML)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        shown.append(r.stdout + r.stderr)
    assert "postgres:***@" in shown[0] and all(PASSWORD not in text for text in shown), shown
    assert (
        "first start (--init): created an empty store at postgresql+psycopg://postgres:***@"
        in shown[0]
    )
