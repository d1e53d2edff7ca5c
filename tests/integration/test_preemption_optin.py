"""Preemption is opt-in, live: the prioritizer's own cycles (real backend, real store) on a real
Slurm with the real filter in front of it.

* plain GPU jobs that fill the node are never signalled or requeued; a more urgent job starts
  when one of them ends;
* a dlsubmit checkpointing job in the same place is signalled, requeued and resumes;
* a job whose own handler runs in an srun step (``--signal=USR2@N``, ``dl:ckpt=steps``) gets USR2
  in its step, checkpoints, requeues itself and resumes;
* a 1,000-task array never preempts its own tasks (and another job does preempt them);
* a user clears Requeue on a signalled victim (as user nobody): the requeue is refused, that run
  is left alone, and every cycle is still saved.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest
from typer.testing import CliRunner

from prioritizer import Prioritizer
from slurm_dl.dlsubmit.cli import app as dlsubmit_app
from slurm_dl.cli.config_file import load_config
from slurm_dl.slurm import CliBackend
from slurm_dl.store import Store
from slurm_dl.testbed import Testbed, job_fields, submit
from test_dlsubmit_e2e import TRAIN
from polling import wait_until
from users import as_user
from test_filter import CONFIG, REPO, FilterProcess, require_testbed_support

HANDLER_IN_STEP = r"""
import os, signal, subprocess, sys, time
ckpt = sys.argv[1]
if os.environ.get("SLURM_RESTART_COUNT") and os.path.exists(ckpt):
    print("resumed from", open(ckpt).read(), flush=True)
    sys.exit(0)
def on_usr2(*_):
    open(ckpt, "w").write("step-%d" % int(time.time()))
    print("USR2 in the step: checkpointed, requeueing myself", flush=True)
    subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]], check=False)
    time.sleep(60)
signal.signal(signal.SIGUSR2, on_usr2)
print("step started", flush=True)
while True:
    time.sleep(1)
"""

TRAPPING = "#!/bin/bash\ntrap 'echo USR2' USR2\nwhile true; do sleep 1 & wait $!; done\n"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, FilterProcess]]:
    """One node of 8 GPUs with the filter service installed in front of slurmctld."""
    require_testbed_support()
    root = tmp_path_factory.mktemp("optin")
    tb = Testbed(
        root / "tb",
        nodes=1,
        gpus_per_node=8,
        gpu_type="h100",
        slurm=os.environ.get("SLURM_DL_TEST_SLURM") or None,
    )
    service = FilterProcess(root / "filter.sock", root / "filter.log")
    try:
        tb.up()
        service.start()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "slurm_dl.cli.main",
                "filter",
                "install",
                "--config",
                str(CONFIG),
                "--slurm-conf-dir",
                str(tb.conf_dir),
                "--socket",
                str(service.sock),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        yield tb, service
    finally:
        service.stop()
        tb.down()


class Cycles:
    """The prioritizer's cycles, run in this process against the live cluster."""

    def __init__(self, tb: Testbed, db: Path) -> None:
        self.store = Store(f"sqlite:///{db}")
        self.prio = Prioritizer(load_config(CONFIG), CliBackend(tb.env()), self.store)
        self.reports = []

    def __call__(self) -> None:
        self.reports.append(self.prio.run_cycle())

    def rows(self, victim: int | None = None):
        return self.store.preemptions(victim=victim)


def state(tb: Testbed, job_id: int) -> str:
    return job_fields(job_id, tb.env()).get("JobState", "")


def restarts(tb: Testbed, job_id: int) -> int:
    return int(job_fields(job_id, tb.env()).get("Restarts", "0") or 0)


def cancel_all(tb: Testbed) -> None:
    subprocess.run(["scancel", "-u", "root"], env=tb.env(), check=False)
    subprocess.run(["scancel", "-u", "nobody"], env=tb.env(), check=False)
    wait_until(
        "the node to empty",
        lambda: (
            not subprocess.run(
                ["squeue", "-h", "-t", "R,CG"], env=tb.env(), capture_output=True, text=True
            ).stdout.strip()
        ),
        60,
    )


def test_plain_jobs_are_never_preempted_and_the_waiting_job_starts_when_one_ends(
    node, tmp_path
) -> None:
    tb, _ = node
    env = tb.env()
    short = submit(
        "#!/bin/bash\nsleep 40\n", env, ["--gpus=4", "-t", "5", "-o", str(tmp_path / "short.out")]
    )
    long = submit(
        "#!/bin/bash\necho start\nsleep 600\n",
        env,
        ["--gpus=4", "-t", "20", "-o", str(tmp_path / "long.out")],
    )
    try:
        wait_until(
            "the plain jobs to run", lambda: state(tb, short) == state(tb, long) == "RUNNING", 60
        )
        cycles = Cycles(tb, tmp_path / "prio.db")
        urgent = submit("#!/bin/bash\nsleep 2\n", env, ["--gpus=4", "-t", "5", "-o", "/dev/null"])
        wait_until(
            "the waiting job to start",
            lambda: state(tb, urgent) in ("RUNNING", "COMPLETING", "COMPLETED"),
            120,
            poll=3.0,
            between=cycles,
        )
        assert cycles.rows() == [], "a plain job was chosen as a victim"
        assert state(tb, long) == "RUNNING" and restarts(tb, long) == 0
        assert "USR2" not in (tmp_path / "long.out").read_text()
        assert state(tb, short) in ("COMPLETED", "COMPLETING")
        assert (
            job_fields(urgent, env)["StartTime"] >= job_fields(short, env)["EndTime"]
        )  # ISO times
        assert len(cycles.reports) >= 5 and not any(
            r.signalled or r.requeued for r in cycles.reports
        )
    finally:
        cancel_all(tb)


def test_dlsubmit_job_is_signalled_requeued_and_resumes(node, tmp_path, monkeypatch) -> None:
    tb, _ = node
    env = tb.env()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_DL_CONFIG", str(CONFIG))
    monkeypatch.setenv("SLURM_DL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLURM_DL_USER_DEFAULTS", str(tmp_path / "none.toml"))
    prog = tmp_path / "train_loop.py"
    prog.write_text(TRAIN)
    res = CliRunner().invoke(
        dlsubmit_app,
        [
            "train",
            "--json",
            "--gpus",
            "8",
            "--time",
            "10",
            "--name",
            "ckpt-train",
            "--launcher",
            "none",
            "--ckpt-glob",
            "state.json",
            "--",
            sys.executable,
            str(prog),
            "400",
            "0.2",
            str(tmp_path / "final.json"),
        ],
    )
    assert res.exit_code == 0, res.output
    sub = json.loads(res.stdout)
    job, ckpt = sub["job_id"], tmp_path / sub["checkpoint_dir"]
    try:
        wait_until("the dlsubmit job to run", lambda: state(tb, job) == "RUNNING", 60)
        cycles = Cycles(tb, tmp_path / "prio.db")
        time.sleep(load_config(CONFIG).preemption.min_runtime_seconds + 1)
        need = submit("#!/bin/bash\nsleep 2\n", env, ["--gpus=1", "-t", "5", "-o", "/dev/null"])
        wait_until(
            "the dlsubmit job to be requeued",
            lambda: restarts(tb, job) >= 1,
            120,
            poll=3.0,
            between=cycles,
        )
        wait_until(
            "the waiting job to run",
            lambda: state(tb, need) in ("RUNNING", "COMPLETING", "COMPLETED"),
            120,
            poll=3.0,
            between=cycles,
        )
        wait_until(
            "the dlsubmit job to resume and finish",
            lambda: state(tb, job) == "COMPLETED",
            240,
            poll=3.0,
            between=cycles,  # the daemon goes on: it sees the job requeued itself
        )
        events = (ckpt / ".dlsubmit" / "events").read_text()
        assert "event=preempt" in events and "event=resume restart=1 from=" in events
        (row,) = cycles.rows(victim=job)
        assert row.state == "requeued-self"  # its script requeued it once the save was done
    finally:
        cancel_all(tb)


def test_handler_in_an_srun_step_gets_the_signal_and_requeues_itself(node, tmp_path) -> None:
    tb, _ = node
    env = tb.env()
    handler = tmp_path / "handler.py"
    handler.write_text(HANDLER_IN_STEP)
    out = tmp_path / "steps.out"
    script = f"#!/bin/bash\nsrun {sys.executable} {handler} {tmp_path / 'step.ckpt'}\n"
    job = submit(
        script,
        env,
        [
            "--gpus=8",
            "-t",
            "10",
            "--requeue",
            "--signal=USR2@30",
            "--comment=dl:ckpt=steps",
            f"--output={out}",
            "--open-mode=append",
        ],
    )
    try:
        wait_until(
            "the step to start",
            lambda: "step started" in (out.read_text() if out.exists() else ""),
            60,
        )
        cycles = Cycles(tb, tmp_path / "prio.db")
        time.sleep(load_config(CONFIG).preemption.min_runtime_seconds + 1)
        need = submit("#!/bin/bash\nsleep 2\n", env, ["--gpus=2", "-t", "5", "-o", "/dev/null"])
        wait_until(
            "the step's own requeue", lambda: restarts(tb, job) >= 1, 120, poll=3.0, between=cycles
        )
        wait_until(
            "the waiting job to run",
            lambda: state(tb, need) in ("RUNNING", "COMPLETING", "COMPLETED"),
            120,
            poll=3.0,
            between=cycles,
        )
        wait_until(
            "the job to resume from its checkpoint",
            lambda: state(tb, job) == "COMPLETED",
            240,
            poll=3.0,
            between=cycles,
        )
        text = out.read_text()
        assert "USR2 in the step" in text and "resumed from step-" in text, text
        (row,) = cycles.rows(victim=job)
        assert row.state == "requeued-self", row  # its own requeue, recorded as such
        decisions = [d.reason for d in cycles.store.decisions(job)]
        assert any("sent to the job's steps" in r for r in decisions), decisions
    finally:
        cancel_all(tb)


def test_a_thousand_task_array_never_preempts_its_own_tasks(node, tmp_path) -> None:
    tb, _ = node
    env = tb.env()
    array = submit(
        TRAPPING,
        env,
        ["--array=0-999", "--gpus=1", "-t", "10", "--comment=dl:ckpt=1", "-o", "/dev/null"],
    )
    try:
        wait_until(
            "eight tasks to run",
            lambda: (
                subprocess.run(
                    ["squeue", "-h", "-t", "R", "-r"], env=env, capture_output=True, text=True
                ).stdout.count("\n")
                >= 8
            ),
            90,
        )
        cycles = Cycles(tb, tmp_path / "prio.db")
        end = time.monotonic() + load_config(CONFIG).preemption.min_runtime_seconds + 20
        while time.monotonic() < end:
            cycles()
            time.sleep(3)
        assert cycles.rows() == [], [r.reason for r in cycles.rows()]
        assert all(
            r.pending >= 1 and r.running >= 8 for r in cycles.reports
        )  # one record holds the pending tasks
        # the planner is alive: a job from outside the array does take a task's GPUs
        other = submit("#!/bin/bash\nsleep 2\n", env, ["--gpus=1", "-t", "5", "-o", "/dev/null"])
        wait_until(
            "a task to yield to the other job", lambda: cycles.rows(), 60, poll=3.0, between=cycles
        )
        victims = {r.victim_job_id for r in cycles.rows()}
        assert all(r.need_job_id == other for r in cycles.rows()), victims
    finally:
        subprocess.run(["scancel", str(array)], env=env, check=False)
        cancel_all(tb)


def test_requeue_cleared_by_the_user_is_refused_locally_and_cycles_keep_saving(tmp_path) -> None:
    """No filter here (a job that entered while the filter failed open can carry anything)."""
    require_testbed_support()
    if shutil.which("runuser") is None:
        pytest.skip("runuser (util-linux) is needed to act as another user")
    # nobody's batch script runs from slurmd's spool: the testbed must be world-traversable
    home = Path(tempfile.mkdtemp(prefix="slurm-dl-optin-"))
    home.chmod(0o755)
    tb = Testbed(
        home / "tb",
        nodes=1,
        gpus_per_node=8,
        gpu_type="h100",
        slurm=os.environ.get("SLURM_DL_TEST_SLURM") or None,
    )
    try:
        _requeue_cleared(tb, tmp_path)
    finally:
        tb.down()
        shutil.rmtree(home, ignore_errors=True)


def _requeue_cleared(tb: Testbed, tmp_path: Path) -> None:
    tb.up()
    env = tb.env()
    as_nobody, public = as_user(tb)

    out = as_nobody(
        "sbatch",
        "--parsable",
        "--gpus=8",
        "-t",
        "10",
        "--requeue",
        "--comment=dl:ckpt=1",
        "-o",
        "/dev/null",
        stdin=TRAPPING,
    )
    assert out.returncode == 0, out.stderr
    victim = int(out.stdout.strip().split(";")[0])
    wait_until("the victim to run", lambda: state(tb, victim) == "RUNNING", 60)
    assert job_fields(victim, env)["UserId"].startswith("nobody")
    cycles = Cycles(tb, tmp_path / "prio.db")
    time.sleep(load_config(CONFIG).preemption.min_runtime_seconds + 1)
    need = submit("#!/bin/bash\nsleep 2\n", env, ["--gpus=8", "-t", "5", "-o", "/dev/null"])
    wait_until(
        "the signal",
        lambda: any(r.state == "signalled" for r in cycles.rows(victim)),
        60,
        poll=3.0,
        between=cycles,
    )
    cleared = as_nobody("scontrol", "update", f"JobId={victim}", "Requeue=0")
    assert cleared.returncode == 0, cleared.stderr
    wait_until(
        "the refused requeue",
        lambda: any(r.state == "refused" for r in cycles.rows(victim)),
        60,
        poll=3.0,
        between=cycles,
    )
    saved = cycles.store.ledger_cycle()
    for _ in range(4):
        time.sleep(3)
        cycles()
    assert cycles.store.ledger_cycle() == saved + 4, "every cycle after the refusal is saved"
    assert state(tb, victim) == "RUNNING" and state(tb, need) == "PENDING"
    assert len(cycles.rows(victim)) == 1, "a refused run is not picked again"
    assert not any(r.errors for r in cycles.reports)
    assert any("refused the requeue" in d.reason for d in cycles.store.decisions(victim))
    subprocess.run(["scancel", str(victim), str(need)], env=env, check=False)
