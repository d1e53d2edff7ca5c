"""Job ids that collide, on a REAL local Slurm: array job 2 (root's) with task 9, and job 29 of
another user (nobody, submitted by root with ``sbatch --uid``). Python's ``int("2_9")`` is 29, so a command that converted its argument
that way would act on job 29; root may cancel anyone's job, so only the parser stands between
``dlsubmit cancel 2_9`` and the other user's job. Checked: cancel ends task 9 of array 2 and
nothing else; ``status``/``explain`` of an array task show that task (its own job id once it
runs, the array's record while it waits), never job 29.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polling import wait_until
from slurm_dl.testbed import submit
from slurm_dl.testbed.client import job_fields

ROOT = Path(__file__).resolve().parents[2]
TESTBED_TOML = ROOT / "site-configs" / "testbed.toml"
runner = CliRunner()


def _squeue(env: dict[str, str], *args: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", *args], env=env, capture_output=True, text=True, timeout=30
    )
    return out.stdout.split()


@pytest.fixture
def collide(make_testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A 1-node, 2-GPU testbed whose first job id is 2: array job 2 (root's, held, tasks 0-9) and
    job 29 (nobody's, held); the ids between were submitted and cancelled."""
    tb = make_testbed(extra_conf=("FirstJobId=2",))
    if tb.bin_dir:
        pytest.skip(
            "checked on the host's own Slurm (sbatch --uid; the CLI runs here, not in a release's root)"
        )
    tb.up()
    env = tb.env()
    array = submit(
        "#!/bin/bash\nsleep 60\n",
        env,
        ["--hold", "--array=0-9", "--gres=gpu:1", "-t", "5", "-o", "/dev/null"],
    )
    assert array == 2
    filler: list[int] = []
    while not filler or filler[-1] < 28:
        filler.append(submit("#!/bin/bash\ntrue\n", env, ["--hold", "-t", "1", "-o", "/dev/null"]))
    subprocess.run(["scancel", *map(str, filler)], env=env, check=True, timeout=30)
    other = submit(
        "#!/bin/bash\nsleep 60\n",
        env,
        [
            "--uid=nobody",
            "--gid=nogroup",
            "--hold",
            "--chdir=/tmp",
            "--gres=gpu:1",
            "-t",
            "5",
            "-o",
            "/dev/null",
        ],
    )
    assert other == 29 and job_fields(29, env)["UserId"].startswith("nobody")
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("SLURM_DL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLURM_DL_USER_DEFAULTS", str(tmp_path / "none.toml"))
    monkeypatch.delenv("SLURM_DL_CONFIG", raising=False)
    return tb, env


def _tasks(env: dict[str, str]) -> list[str]:
    return sorted(_squeue(env, "-r", "-j", "2", "-o", "%K"), key=int)


def test_cancel_2_9_ends_task_9_of_array_2_and_never_job_29(collide) -> None:
    from slurm_dl.dlsubmit.cli import app

    _, env = collide
    assert _tasks(env) == [str(t) for t in range(10)]
    r = runner.invoke(app, ["cancel", "2_9"])
    assert r.exit_code == 0 and r.stdout.strip() == "cancelled 2_9", r.output
    assert _tasks(env) == [str(t) for t in range(9)]
    assert job_fields(29, env)["JobState"] == "PENDING"
    r = runner.invoke(app, ["cancel", "2_[1-2,5]"])
    assert r.exit_code == 0, r.output
    assert _tasks(env) == ["0", "3", "4", "6", "7", "8"]
    for bad in ("2_9%1", "2__9", "２_９", "٢٩"):
        r = runner.invoke(app, ["cancel", bad])
        assert r.exit_code == 1 and r.output.startswith("error: JOBID"), r.output
    assert job_fields(29, env)["JobState"] == "PENDING"
    assert _tasks(env) == ["0", "3", "4", "6", "7", "8"]


def test_status_and_explain_of_an_array_task_never_show_another_job(
    collide, tmp_path: Path
) -> None:
    from slurm_dl.dlsubmit.cli import app as dlsubmit
    from slurm_dl.cli.main import app as slurm_dl

    _, env = collide
    subprocess.run(["scontrol", "release", "2"], env=env, check=True, timeout=30)
    wait_until(
        "two tasks of array 2 to run",
        lambda: len(_squeue(env, "-r", "-t", "R", "-j", "2", "-o", "%i")) == 2,
        60,
    )
    running = dict(
        line.split("|") for line in _squeue(env, "-r", "-t", "R", "-j", "2", "-o", "%K|%A")
    )
    task, own_id = sorted(running.items())[0]
    assert int(own_id) not in (2, 29) and own_id != f"2{task}"
    waiting = next(t for t in map(str, range(10)) if t not in running)

    def status(ref: str) -> tuple[list[int], str]:
        r = runner.invoke(dlsubmit, ["status", ref, "--json"])
        assert r.exit_code == 0, r.output
        return [row["job_id"] for row in json.loads(r.stdout)], r.stderr

    assert status(f"2_{task}") == ([int(own_id)], "")
    ids, note = status(f"2_{waiting}")
    assert ids == [2] and f"2_{waiting} is pending in the array's own record, job 2" in note
    assert status("29")[0] == [29]

    cfg, db = TESTBED_TOML, f"sqlite:///{tmp_path / 'prio.db'}"  # preempts only jobs that opted in
    subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "prioritizer",
            "once",
            "--init",
            "--config",
            str(cfg),
            "--db",
            db,
        ],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )

    def explain(ref: str):
        return runner.invoke(
            slurm_dl, ["explain", ref, "--config", str(cfg), "--db", db, "--no-live", "--json"]
        )

    assert json.loads(explain("29").stdout)["job_id"] == 29
    for t in range(10):
        r = explain(f"2_{t}")
        expected = int(running.get(str(t), 2))
        if r.exit_code == 0:  # the store has the task's (or its array's) record
            assert json.loads(r.stdout)["job_id"] == expected, (t, r.output)
        else:
            assert f"job 2_{t} (job {expected})" in r.output, (t, r.output)
    r = explain(f"2_{waiting}")
    assert r.exit_code == 0 and json.loads(r.stdout)["job_id"] == 2, r.output
    assert f"2_{waiting} is pending in the array's own record, job 2" in r.stderr
