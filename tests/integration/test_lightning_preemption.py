"""Acceptance: preemption of a REAL PyTorch Lightning run (``SLURMEnvironment(auto_requeue=True)``).

Lightning (checked on 2.6.6) installs a handler for ``SLURMEnvironment.requeue_signal`` (SIGUSR1
unless set) in the training process. On the signal it saves ``hpc_ckpt_<N>.ckpt`` in
``default_root_dir`` from inside the handler (mid-step), then rank 0 runs ``scontrol requeue
$SLURM_JOB_ID`` (a failure is only logged) and training goes on until the requeue's SIGTERM
("Bypassing SIGTERM"; the loop stops at the end of the batch); restarted, ``fit()`` finds the
newest hpc checkpoint by itself and resumes from it. The job script says
``#SBATCH --signal=SIGUSR1@90``, without ``B:``: the signal must reach the srun step, and it must
be USR1: USR2 (the site's default) kills the training process (srun exits 140, the job FAILS
without a checkpoint).

Lightning and torch are not CI dependencies: this test needs a Python that imports both, the
one running the tests or ``SLURM_DL_LIGHTNING_PYTHON`` (e.g. a venv made with
``pip install torch==2.13.0 lightning``); it skips otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from clients import StepLog, fields, submit_bash, wait_finished
from polling import wait_until
from slurm_dl.core.tags import parse_tag
from slurm_dl.store import Store
from slurm_dl.testbed import submit
from test_clients_preemption import node  # noqa: F401, F811  (a 1 x 8 GPU testbed with the filter, this module's own)
from test_prioritizer import Daemon

STEPS = 40

TRAIN = r'''
"""A tiny Lightning run on the CPU that logs every optimizer step (global_step) and every save."""
import os, sys, time
import torch
import lightning as L
from lightning.pytorch.plugins.environments import SLURMEnvironment

root, steps, log, dt = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])


def rec(text):
    with open(log, "a") as f:
        f.write(f"{text} run={os.environ.get('SLURM_RESTART_COUNT', '0')} t={time.time():.3f}\n")


class Counter(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        time.sleep(dt)
        return self.layer(batch[0]).pow(2).mean()

    def on_train_batch_end(self, outputs, batch, i):
        rec(f"step {self.global_step - 1}")

    def on_save_checkpoint(self, checkpoint):
        rec(f"checkpoint-end done={self.global_step}")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Start(L.Callback):
    def on_train_start(self, trainer, module):
        rec(f"start done={trainer.global_step}")


data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(steps * 2, 4)), batch_size=1)
trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, default_root_dir=root, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    plugins=[SLURMEnvironment(auto_requeue=True)], callbacks=[Start()])
trainer.fit(Counter(), data)
rec(f"finished global_step={trainer.global_step}")
'''

SCRIPT = """#!/bin/bash
#SBATCH --signal=SIGUSR1@90
#SBATCH --requeue
#SBATCH --comment=dl:ckpt=steps
#SBATCH --gpus=8
#SBATCH --time=60
srun {python} {train} {root} {steps} {log} 1
"""


def _lightning_python() -> str | None:
    """``SLURM_DL_LIGHTNING_PYTHON``, or the Python running the tests if it has lightning and torch."""
    given = os.environ.get("SLURM_DL_LIGHTNING_PYTHON")
    if given:
        return given if os.access(given, os.X_OK) else None
    if importlib.util.find_spec("lightning") and importlib.util.find_spec("torch"):
        return sys.executable
    return None


LIGHTNING_PYTHON = _lightning_python()
pytestmark = pytest.mark.skipif(
    LIGHTNING_PYTHON is None,
    reason="lightning is not importable (not a CI dependency): set "
    "SLURM_DL_LIGHTNING_PYTHON to a Python with `pip install torch==2.13.0 lightning`",
)


def test_lightning_run_checkpoints_requeues_itself_and_resumes(node, tmp_path) -> None:  # noqa: F811
    python = LIGHTNING_PYTHON
    check = subprocess.run(
        [python, "-c", "import lightning, torch"], capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 0, (
        f"{python} cannot import lightning and torch: {check.stderr[-500:]}"
    )
    tb = node
    env = tb.env()
    (tmp_path / "train.py").write_text(TRAIN)
    log = StepLog(tmp_path / "steps.log")
    out = tmp_path / "lightning.out"
    plain = submit_bash(
        env, tmp_path / "plain", steps=600, directives=(), sbatch_args=("--gres=gpu:0", "-t", "10")
    )
    victim = submit(
        SCRIPT.format(
            python=python, train=tmp_path / "train.py", root=tmp_path, steps=STEPS, log=log.path
        ),
        env,
        [f"--output={out}", "--open-mode=append"],
    )
    daemon = Daemon(env, f"sqlite:///{tmp_path / 'prio.db'}", tmp_path / "daemon.log")
    try:
        wait_until("training to start", lambda: log.starts(), 90)
        tag = parse_tag(fields(env, victim).get("AdminComment"))
        assert tag is not None and tag.checkpointable and tag.signal_target == "steps", tag
        assert (tag.signal, tag.lead_s) == ("USR1", 90), tag
        daemon.start()
        need = submit("#!/bin/bash\nsleep 3\n", env, ["--gpus=1", "-t", "5", "-o", "/dev/null"])
        final = wait_finished(env, victim, timeout=150, settle=20)
        plain_fields, plain_signals = fields(env, plain.job_id), plain.log.signals()
    finally:
        daemon.stop()
        subprocess.run(["scancel", "-u", "root"], env={**os.environ, **env}, check=False)
    text = out.read_text() if out.exists() else ""
    daemon_log = daemon.text()
    rows = Store(f"sqlite:///{tmp_path / 'prio.db'}").preemptions()
    context = f"\n--- steps.log\n{chr(10).join(log.lines())}\n--- job\n{text[-3000:]}\n--- daemon\n{daemon_log[-3000:]}"

    assert text.count("Handling auto-requeue signal: 10") == 1, "not exactly one SIGUSR1" + context
    assert f"Requeued SLURM job: {victim}" in text, "Lightning's own requeue failed" + context
    assert sorted(tmp_path.glob("hpc_ckpt_*.ckpt")) == [tmp_path / "hpc_ckpt_1.ckpt"], context
    (k,) = log.checkpoints()
    assert log.starts() == [(0, 0), (k, 1)], context
    run0 = [s for s, r in _steps_by_run(log) if r == 0]
    run1 = [s for s, r in _steps_by_run(log) if r == 1]
    # the step in flight when the handler saved is done again after the resume (at most one)
    assert run0[:k] == list(range(k)) and len(run0) - k <= 1, context
    assert run1 == list(range(k, STEPS)), (
        "the resumed run did not continue from its checkpoint" + context
    )
    assert f"finished global_step={STEPS} run=1" in "\n".join(log.lines()), context
    assert final.get("JobState") == "COMPLETED" and final.get("Restarts") == "1", (final, context)
    assert [(r.victim_job_id, r.need_job_id, r.state) for r in rows] == [
        (victim, need, "requeued-self")
    ], (rows, context)
    assert f"requeued job {victim} " not in daemon_log, (
        "the prioritizer requeued a job that requeued itself" + context
    )

    assert plain_signals == [], plain.log.lines()
    assert plain_fields.get("JobState") == "RUNNING" and plain_fields.get("Restarts") == "0", (
        plain_fields
    )


def _steps_by_run(log: StepLog) -> list[tuple[int, int]]:
    out = []
    for line in log.lines():
        if line.startswith("step "):
            kv = dict(w.split("=", 1) for w in line.split()[2:])
            out.append((int(line.split()[1]), int(kv["run"])))
    return out
