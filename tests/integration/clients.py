"""Live-test helpers: jobs submitted the way the REAL client packages submit them.

* :func:`submit_submitit`: a ``submitit.helpers.Checkpointable`` step counter submitted by
  submitit 1.5.x itself (its own sbatch script: ``#SBATCH --signal=USR2@<slurm_signal_delay_s>``
  to the steps, ``srun python -m submitit.core._submit``). On USR2 submitit calls
  ``checkpoint()``, pickles the returned state and runs ``scontrol requeue $SLURM_JOB_ID``
  itself; restarted, it unpickles the state and goes on.
* :func:`submit_bash`: a plain sbatch script that counts steps and traps signals in its batch
  shell: the ``dl:ckpt=1`` client (``--signal=B:USR2@N``, checkpoint, optional self-requeue),
  or, with no comment and no ``--signal``, a job that did not opt in and only logs what it gets.

Both write one step log: ``start done=K run=R``, ``step N run=R``, ``checkpoint-begin done=K``,
``checkpoint-end done=K``, ``signal NAME``, ``finished``, each followed by ``run=R t=UNIX``.
A step is recorded and counted in one critical section (USR2 blocked in Python, a flag checked
between steps in bash), so "every step exactly once" is a real property of the resume, not luck.

The job process must import this module to unpickle :class:`StepCounter`: the submitit script
exports ``PYTHONPATH`` to this directory (``slurm_setup``). Keep this module free of pytest and of
heavy imports.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import submitit

HERE = Path(__file__).resolve().parent
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}


def _record(log: str, text: str) -> None:
    with open(log, "a") as f:
        f.write(f"{text} run={os.environ.get('SLURM_RESTART_COUNT', '0')} t={time.time():.3f}\n")


class StepCounter(submitit.helpers.Checkpointable):
    """Counts ``steps`` steps of ``dt`` seconds into ``log``; ``checkpoint()`` takes
    ``ckpt_sleep`` seconds (a slow save). Returns ``{"done": steps, "restarts": R}``."""

    def __init__(self, steps: int, log: str, dt: float = 1.0, ckpt_sleep: float = 0.0) -> None:
        self.steps, self.log, self.dt, self.ckpt_sleep = steps, log, dt, ckpt_sleep
        self.done = 0

    def __call__(self) -> dict[str, int]:
        _record(self.log, f"start done={self.done}")
        while self.done < self.steps:
            time.sleep(self.dt)
            # submitit's handler runs between two bytecodes: keep "step N logged" and "done=N+1" together
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
            _record(self.log, f"step {self.done}")
            self.done += 1
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
        _record(self.log, "finished")
        return {"done": self.done, "restarts": int(os.environ.get("SLURM_RESTART_COUNT", "0"))}

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        _record(self.log, f"checkpoint-begin done={self.done}")
        time.sleep(self.ckpt_sleep)
        _record(self.log, f"checkpoint-end done={self.done}")
        return super().checkpoint(*args, **kwargs)


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    """submitit runs sbatch (and looks for srun) with os.environ: point it at the testbed."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class StepLog:
    """The step log a job writes (both helpers use the same format)."""

    path: Path

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def steps(self) -> list[int]:
        return [int(line.split()[1]) for line in self.lines() if line.startswith("step ")]

    def starts(self) -> list[tuple[int, int]]:
        """(done at start, SLURM_RESTART_COUNT) of every run."""
        out = []
        for line in self.lines():
            if line.startswith("start "):
                kv = dict(w.split("=", 1) for w in line.split()[1:])
                out.append((int(kv["done"]), int(kv["run"])))
        return out

    def checkpoints(self) -> list[int]:
        """``done`` at every completed checkpoint."""
        return [
            int(line.split()[1].split("=")[1])
            for line in self.lines()
            if line.startswith("checkpoint-end ")
        ]

    def signals(self) -> list[str]:
        return [line.split()[1] for line in self.lines() if line.startswith("signal ")]

    def times(self, prefix: str) -> list[float]:
        return [float(line.rsplit("t=", 1)[1]) for line in self.lines() if line.startswith(prefix)]

    def finished(self) -> bool:
        return any(line.startswith("finished ") for line in self.lines())


@dataclass
class SubmititRun:
    """A submitit job and what it left: its step log, submitit's own logs, the result pickle."""

    job: submitit.Job
    log: StepLog
    env: dict[str, str]
    outcome: tuple[str, object] | None = field(default=None)
    """What a client calling ``job.result()`` got FIRST: ("result", value) or ("raised", exc)."""

    @property
    def job_id(self) -> int:
        return int(self.job.job_id)

    def script(self) -> str:
        return Path(self.job.paths.submission_file).read_text()

    def submitit_log(self) -> str:
        """submitit's stdout and stderr of every run (it opens them in append mode)."""
        parts = [
            p.read_text()
            for p in (Path(self.job.paths.stdout), Path(self.job.paths.stderr))
            if p.exists()
        ]
        return "\n".join(parts)

    def caught(self, name: str = "SIGUSR2") -> int:
        """How many times submitit's handler caught ``name`` (across runs; its logger writes each
        warning to both streams, so only stdout is counted)."""
        out = Path(self.job.paths.stdout)
        return out.read_text().count(f"Caught signal {name}") if out.exists() else 0

    def poll_result(self) -> None:
        """Act like a client blocked in ``job.result()``: the first time the result pickle exists,
        take what ``result()`` gives (a requeue that failed inside the job writes an ERROR pickle
        mid-run, which the final success overwrites later: a client sees the error)."""
        if self.outcome is None and Path(self.job.paths.result_pickle).exists():
            try:
                self.outcome = ("result", self.job.result())
            except Exception as e:  # FailedJobError, UncompletedJobError
                self.outcome = ("raised", e)


def submit_submitit(
    env: Mapping[str, str],
    folder: Path,
    *,
    steps: int,
    dt: float = 1.0,
    ckpt_sleep: float = 0.0,
    gpus: int = 8,
    comment: str | None = "dl:ckpt=steps",
    signal_delay_s: int = 90,
    timeout_min: int = 60,
    python: str | None = None,
    **more,
) -> SubmititRun:
    """Submit a :class:`StepCounter` with submitit's AutoExecutor to the testbed ``env`` (``tb.env()``).

    ``timeout_min`` stays >= 50: submitit counts a USR2 as a *timeout* (and spends one of its
    ``max_num_timeout`` = 3 requeues) whenever the run is past min(80 %, limit - 10 min) of its
    time limit, which is always for limits under 50 minutes. ``python`` defaults to the
    interpreter running the tests (the venv's). ``more``: further executor parameters
    (``slurm_additional_parameters={...}``...).
    """
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "steps.log"
    params = dict(
        timeout_min=timeout_min,
        gpus_per_node=gpus,
        nodes=1,
        tasks_per_node=1,
        slurm_signal_delay_s=signal_delay_s,
        slurm_setup=[f"export PYTHONPATH={shlex.quote(str(HERE))}"],
        name=folder.name,
    )
    if comment is not None:
        params["slurm_comment"] = comment
    params.update(more)
    with _environ(env):
        ex = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm", slurm_python=python)
        ex.update_parameters(**params)
        job = ex.submit(StepCounter(steps, str(log), dt, ckpt_sleep))
    return SubmititRun(job, StepLog(log), dict(env))


BASH = r"""#!/bin/bash
{directives}
LOG={log}; CKPT={ckpt}; STEPS={steps}; DT={dt}
rec() {{ echo "$1 run=${{SLURM_RESTART_COUNT:-0}} t=$(date +%s.%N)" >> "$LOG"; }}
done=0; [ -f "$CKPT" ] && done=$(cat "$CKPT")
rec "start done=$done"
stop=
for s in USR1 USR2 TERM INT HUP; do trap "rec 'signal $s'; stop=$s" $s; done
while [ "$done" -lt "$STEPS" ]; do
  sleep "$DT" & wait $!
  if [ -n "$stop" ] && [ "$stop" = "{ckpt_signal}" ]; then
    rec "checkpoint-begin done=$done"; echo "$done" > "$CKPT.tmp" && mv "$CKPT.tmp" "$CKPT"; rec "checkpoint-end done=$done"
    {after_checkpoint}
  fi
  stop=
  rec "step $done"; done=$((done + 1))
done
rec finished
"""
SELF_REQUEUE = 'scontrol requeue "$SLURM_JOB_ID"; sleep 60 & wait $!; exit 0'
WAIT_FOR_REQUEUE = "while true; do sleep 1 & wait $!; done"


@dataclass
class BashRun:
    job_id: int
    log: StepLog
    out: Path


def submit_bash(
    env: Mapping[str, str],
    folder: Path,
    *,
    steps: int,
    dt: float = 1.0,
    directives: tuple[str, ...] = ("--requeue", "--signal=B:USR2@60", "--comment=dl:ckpt=1"),
    sbatch_args: tuple[str, ...] = (),
    self_requeue: bool = True,
    ckpt_signal: str = "USR2",
) -> BashRun:
    """Submit the bash step counter. Its batch shell traps USR1, USR2, TERM, INT and HUP and logs
    each as ``signal NAME``; on ``ckpt_signal`` (between two steps) it saves ``done`` and then
    requeues itself (``self_requeue``) or waits for someone else's requeue. ``directives`` become
    ``#SBATCH`` lines (where the filter reads ``--signal``); ``()`` and no comment make a job that
    did not opt in."""
    folder.mkdir(parents=True, exist_ok=True)
    log, out = folder / "steps.log", folder / "slurm-%j.out"
    script = BASH.format(
        directives="\n".join(f"#SBATCH {d}" for d in directives),
        log=shlex.quote(str(log)),
        ckpt=shlex.quote(str(folder / "ckpt")),
        steps=steps,
        dt=dt,
        ckpt_signal=ckpt_signal,
        after_checkpoint=SELF_REQUEUE if self_requeue else WAIT_FOR_REQUEUE,
    )
    res = subprocess.run(
        ["sbatch", "--parsable", f"--output={out}", "--open-mode=append", *sbatch_args],
        input=script,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    if res.returncode != 0:
        raise AssertionError(f"sbatch refused the bash counter: {res.stderr.strip()}")
    job_id = int(res.stdout.strip().split(";")[0])
    return BashRun(job_id, StepLog(log), folder / f"slurm-{job_id}.out")


def fields(env: Mapping[str, str], job_id: int) -> dict[str, str]:
    """``scontrol -o show job`` fields; {} once the job has left slurmctld."""
    from slurm_dl.testbed import job_fields

    try:
        return job_fields(job_id, env)
    except Exception:
        return {}


def wait_finished(
    env: Mapping[str, str],
    job_id: int,
    *,
    timeout: float = 120.0,
    settle: float = 20.0,
    poll: float = 1.0,
    on_poll=None,
) -> dict[str, str]:
    """Wait until the job is COMPLETED, or has sat in another final state for ``settle`` seconds
    with the same restart count (a victim that died may still be requeued by the prioritizer);
    returns its last fields (the caller asserts). ``on_poll`` runs every poll (e.g.
    ``SubmititRun.poll_result``). Raises AssertionError past ``timeout``."""
    end = time.monotonic() + timeout
    since: tuple[str, str, float] | None = None
    last: dict[str, str] = {}
    while True:
        if on_poll is not None:
            on_poll()
        last = fields(env, job_id) or last
        state, restarts = last.get("JobState", ""), last.get("Restarts", "")
        if state == "COMPLETED":
            return last
        if state in FINAL_STATES:
            if since is None or since[:2] != (state, restarts):
                since = (state, restarts, time.monotonic())
            elif time.monotonic() - since[2] >= settle:
                return last
        else:
            since = None
        if time.monotonic() > end:
            raise AssertionError(
                f"job {job_id} not finished after {timeout:.0f} s: "
                f"{state or '?'} restarts={restarts or '?'} reason={last.get('Reason')}"
            )
        time.sleep(poll)


def wait_result(
    run: SubmititRun, *, timeout: float = 120.0, settle: float = 20.0
) -> tuple[dict[str, str], tuple]:
    """:func:`wait_finished` for a submitit job, then what ``job.result()`` gave a client that was
    waiting all along: ``(fields, ("result", value) | ("raised", exc) | ("none", reason))``.
    Never blocks in ``job.result()`` without a result pickle (without slurmdbd, submitit's sacct
    poll fails and ``result()`` would wait forever)."""
    f = wait_finished(run.env, run.job_id, timeout=timeout, settle=settle, on_poll=run.poll_result)
    end = time.monotonic() + 15
    while run.outcome is None and time.monotonic() < end:
        run.poll_result()
        time.sleep(0.5)
    return f, run.outcome or ("none", f"no result pickle; job {f.get('JobState')}")
