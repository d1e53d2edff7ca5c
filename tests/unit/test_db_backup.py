"""``slurm-dl db backup``: a copy of a SQLite store that keeps what is still in its
write-ahead log, where ``cp ledger.db`` loses it. The store is left as a crashed daemon leaves
it: a real process saves a cycle and dies without closing its connection."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.store import Store

CRASH = """
import os, sys
from slurm_dl.core.ledger import Ledger
from slurm_dl.store import CycleWrite, Store
store = Store(sys.argv[1])
store.save_cycle(CycleWrite(now=1.0, cycle=1, ledger=Ledger(),
                            decisions=[(42, "sitefactor", 5, "waits behind a sweep")]))
os._exit(0)  # a crash: no checkpoint, the cycle stays in the -wal file
"""


@pytest.fixture
def crashed(tmp_path: Path) -> Path:
    db = tmp_path / "ledger.db"
    Store(f"sqlite:///{db}").close()
    subprocess.run([sys.executable, "-c", CRASH, f"sqlite:///{db}"], check=True, timeout=60)
    assert (tmp_path / "ledger.db-wal").stat().st_size > 0
    return db


def test_backup_keeps_the_cycle_a_plain_copy_loses(crashed: Path, tmp_path: Path) -> None:
    copied = tmp_path / "copied.db"
    shutil.copy(crashed, copied)  # the step the guide used to give
    assert Store(f"sqlite:///{copied}").decisions(42) == []
    backup = tmp_path / "backup.db"
    r = CliRunner().invoke(app, ["db", "backup", str(backup), "--db", f"sqlite:///{crashed}"])
    assert r.exit_code == 0, r.output
    assert f"backed up to {backup}" in r.output and "checked" in r.output
    assert not Path(f"{backup}-wal").exists()  # one self-contained file
    assert [d.reason for d in Store(f"sqlite:///{backup}").decisions(42)] == [
        "waits behind a sweep"
    ]
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600  # every user's jobs: the owner's alone


def test_backup_refuses_what_it_cannot_do_safely(crashed: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{crashed}"
    taken = tmp_path / "taken.db"
    taken.write_text("an earlier backup")
    r = CliRunner().invoke(app, ["db", "backup", str(taken), "--db", url])
    assert r.exit_code == 1 and "never overwrites" in r.output
    assert taken.read_text() == "an earlier backup"
    r = CliRunner().invoke(
        app, ["db", "backup", str(tmp_path / "b.db"), "--db", "postgresql+psycopg://u@h/db"]
    )
    assert r.exit_code == 1 and "pg_dump" in r.output and not (tmp_path / "b.db").exists()
    r = CliRunner().invoke(
        app, ["db", "backup", str(tmp_path / "c.db"), "--db", f"sqlite:///{tmp_path / 'no.db'}"]
    )
    assert r.exit_code == 1 and "no such file" in r.output and not (tmp_path / "c.db").exists()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 200)
    r = CliRunner().invoke(
        app, ["db", "backup", str(tmp_path / "d.db"), "--db", f"sqlite:///{junk}"]
    )
    assert r.exit_code == 1 and "backup failed" in r.output and not (tmp_path / "d.db").exists()
    assert "Traceback" not in r.output and os.path.exists(crashed)
