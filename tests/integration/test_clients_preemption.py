"""Acceptance: preemption of a job submitted by the REAL submitit (1.5.x), end to end.

A private 1 node x 8 GPU testbed with the filter installed and `slurm-dl prioritizer run` as a
subprocess (site-configs/testbed.toml: LAS demotes a job after 20 s of run, grace_seconds = 10).
A submitit ``Checkpointable`` step counter holds all 8 GPUs; a plain CPU job that did not opt in
runs beside it; a 1-GPU job arrives and outranks the counter once it has run 20 s. The counter
must be signalled once (USR2, in its srun step, where its ``#SBATCH --signal=USR2@N`` asks),
checkpoint, requeue ITSELF, resume from its checkpoint and complete with every step counted once,
and a client waiting in ``job.result()`` gets the result (not an exception). The plain job is never
signalled and never requeued.

Cases:
* ``steps``: ``slurm_comment="dl:ckpt=steps"``, submitit's default ``@90``, instant checkpoint.
* ``ckpt1``: ``dl:ckpt=1`` (a user's wrong declaration for a submitit job): the filter must follow
  the script's ``--signal=USR2@90`` (the steps), not the comment (the batch shell: submitit's
  batch shell has no handler and dies of USR2, WTERMSIG 12, without a checkpoint).
* ``slow-checkpoint``: ``checkpoint()`` takes 14 s, more than the site's grace_seconds (10 s), less
  than the job's declared lead (``slurm_signal_delay_s=40``). The prioritizer must wait the job's
  lead (within ``preemption.max_lead_seconds``), not the grace: if it requeues first, submitit's
  own ``scontrol requeue`` fails ("Job is pending execution"), submitit writes an ERROR result
  pickle mid-run and a waiting ``job.result()`` raises FailedJobError, although the job then
  resumes and completes.
"""

from __future__ import annotations

import os
import subprocess
from typing import Iterator

import pytest

pytest.importorskip("submitit")

from clients import fields, submit_bash, submit_submitit, wait_result  # noqa: E402
from polling import wait_until  # noqa: E402
from slurm_dl.core.tags import parse_tag  # noqa: E402
from slurm_dl.store import Store  # noqa: E402
from slurm_dl.testbed import Testbed, submit  # noqa: E402
from test_filter import filtered_testbed  # noqa: E402
from test_prioritizer import Daemon  # noqa: E402

STEPS = 40  # one step a second: preempted after ~20 s, resumed ~12 s later (cred_expire=10)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """One node of 8 GPUs with the filter service installed in front of slurmctld."""
    with filtered_testbed(tmp_path_factory.mktemp("clients"), 1) as (tb, _):
        yield tb


def _cancel_all(tb: Testbed) -> None:
    subprocess.run(["scancel", "-u", "root"], env={**os.environ, **tb.env()}, check=False)
    wait_until(
        "the node to empty",
        lambda: (
            not subprocess.run(
                ["squeue", "-h", "-t", "R,CG"],
                env={**os.environ, **tb.env()},
                capture_output=True,
                text=True,
            ).stdout.strip()
        ),
        60,
    )


CASES = [
    pytest.param("dl:ckpt=steps", 90, 0.0, id="steps"),
    pytest.param("dl:ckpt=1", 90, 0.0, id="ckpt1"),
    pytest.param("dl:ckpt=steps", 40, 14.0, id="slow-checkpoint"),
]


@pytest.mark.parametrize("comment,lead,ckpt_sleep", CASES)
def test_submitit_job_checkpoints_requeues_itself_and_resumes(
    node, tmp_path, comment, lead, ckpt_sleep
) -> None:
    tb = node
    env = tb.env()
    plain = submit_bash(
        env, tmp_path / "plain", steps=600, directives=(), sbatch_args=("--gres=gpu:0", "-t", "10")
    )
    run = submit_submitit(
        env,
        tmp_path / "victim",
        steps=STEPS,
        comment=comment,
        signal_delay_s=lead,
        ckpt_sleep=ckpt_sleep,
    )
    victim = run.job_id
    daemon = Daemon(env, f"sqlite:///{tmp_path / 'prio.db'}", tmp_path / "daemon.log")
    try:
        wait_until("the counter to start", lambda: run.log.starts(), 60)
        tag = parse_tag(fields(env, victim).get("AdminComment"))
        assert tag is not None and tag.checkpointable and tag.signal_target == "steps", (
            tag,
            run.script(),
        )
        assert (tag.signal, tag.lead_s) == ("USR2", lead), tag
        daemon.start()
        need = submit("#!/bin/bash\nsleep 3\n", env, ["--gpus=1", "-t", "5", "-o", "/dev/null"])
        final, outcome = wait_result(run, timeout=110 + ckpt_sleep, settle=20)
        plain_fields, plain_signals = (
            fields(env, plain.job_id),
            plain.log.signals(),
        )  # before the cancel's TERM
    finally:
        daemon.stop()
        _cancel_all(tb)
    daemon_log = daemon.text()
    rows = Store(f"sqlite:///{tmp_path / 'prio.db'}").preemptions()
    context = (
        f"\n--- steps.log\n{chr(10).join(run.log.lines())}\n--- submitit\n{run.submitit_log()[-3000:]}"
        f"\n--- daemon\n{daemon_log[-3000:]}"
    )

    # the victim: signalled once, checkpointed once, requeued by itself, resumed, complete
    assert run.caught("SIGUSR2") == 1, context
    assert len(run.log.checkpoints()) == 1, context
    (k,) = run.log.checkpoints()
    assert run.log.starts() == [(0, 0), (k, 1)], context
    assert run.log.steps() == list(range(STEPS)), "a step lost or counted twice" + context
    assert final.get("JobState") == "COMPLETED" and final.get("Restarts") == "1", (final, context)
    assert "triggered an exception" not in run.submitit_log(), (
        "submitit's own requeue failed" + context
    )
    assert outcome == ("result", {"done": STEPS, "restarts": 1}), (outcome, context)
    assert [(r.victim_job_id, r.need_job_id, r.state) for r in rows] == [
        (victim, need, "requeued-self")
    ], (rows, context)
    assert f"requeued job {victim} " not in daemon_log, (
        "the prioritizer requeued a job that requeued itself" + context
    )
    assert fields(env, need).get("JobState") in ("COMPLETED", None), fields(env, need)

    # the job that did not opt in: never signalled, never requeued, still running
    assert plain_signals == [], plain.log.lines()
    assert plain_fields.get("JobState") == "RUNNING" and plain_fields.get("Restarts") == "0", (
        plain_fields
    )
    assert all(r.victim_job_id != plain.job_id for r in rows)
