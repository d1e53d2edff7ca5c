"""A what-if's replays as one Slurm job array (``slurm-dl simulate --via-slurm``), through
submitit's Slurm executor.

The what-if's inputs (the jobs as read and filtered, each policy's settings) are written once
to a file in the work folder; each array task reads that file and runs its own replay, so no
job list travels with a task. Results come back as submitit's result files; a task that
fails (an error, or killed, cancelled, out of time: gone from the queue without a result) is
reported by name with its log, and the others' results are kept. The work folder goes away
once every task succeeded; it stays, with the logs, when one failed.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..core.errors import JobNotFoundError, SlurmDLError, SlurmError
from .runner import run_slurm

_CONTEXT: dict = {}  # in an array task: the loaded inputs, by path


@dataclass
class FailedTask:
    index: int
    job_id: str
    why: str
    log: Path


def parse_time_limit(text: str | None) -> int:
    """``--time``: minutes (``90``) or Slurm's ``[D-]H:MM[:SS]``; minutes, at least 1."""
    if text is None or str(text).strip() == "":
        return 60
    s = str(text).strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d{1,2})(?::(\d{1,2}))?", s)
    try:
        if m:
            d, h, mi, sec = (int(x) if x else 0 for x in m.groups())
            minutes = d * 1440 + h * 60 + mi + (1 if sec else 0)
        else:
            minutes = int(s)
    except ValueError:
        minutes = 0
    if minutes < 1:
        raise SlurmDLError(f"--time: got {text!r}; allowed: minutes (90) or H:MM[:SS] (1:30:00), at least 1 minute")
    return minutes


def run_array_task(context: str, index: int):
    """In a Slurm array task: replay task ``index`` of the what-if written to ``context``."""
    from ..sim.engine import ClusterResult
    from ..sim.simulate import run_replay

    ctx = _CONTEXT.get(context)
    if ctx is None:
        with open(context, "rb") as fh:
            ctx = _CONTEXT[context] = pickle.load(fh)
    task = ctx["tasks"][index]
    out = run_replay(ctx["jobs"], ctx["recipes"][task.run], ctx["setups"][task.run], task.replay,
                     summary_only=ctx["summary_only"][task.run])
    return out.packed() if isinstance(out, ClusterResult) else out


def run_array(tasks: Sequence, inputs: dict, on_done: Callable[[int, object], None], *, folder: Path,
              partition: str | None, time_min: int, name_of: Callable[[int], str],
              tick: Callable[[int, int], None] | None = None, say: Callable[[str], None] = print,
              poll_s: float = 2.0) -> list[FailedTask]:
    """Submit ``tasks`` as one array, hand each result to ``on_done(index, output)`` as it
    arrives, and return the tasks that failed. ``inputs``: what :func:`run_array_task` reads
    (``jobs``, ``recipes``, ``setups``, ``summary_only``: per planned run; ``tasks`` is added). ``say(line)``: a line for the
    user; a path in it follows a NUL (``"logs in:\\0/path"``), to print whole."""
    import submitit

    try:
        folder.mkdir(parents=True, exist_ok=True)
        context = folder / "inputs.pickle"
        with open(context, "wb") as fh:
            pickle.dump({**inputs, "tasks": list(tasks)}, fh, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError as e:
        raise SlurmDLError(f"--via-slurm: cannot write the work folder {folder}: {e.strerror or e}") from None
    ex = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")  # an array task: ARRAY_N
    params = dict(timeout_min=time_min, cpus_per_task=1, nodes=1, tasks_per_node=1, name="slurm-dl-whatif",
                  slurm_array_parallelism=len(tasks))
    if partition:
        params["slurm_partition"] = partition
    ex.update_parameters(**params)
    try:
        jobs = ex.map_array(run_array_task, [str(context)] * len(tasks), list(range(len(tasks))))
    except Exception as e:  # submitit raises its own errors for sbatch's refusals
        raise SlurmDLError(f"--via-slurm: Slurm refused the job array: {str(e).strip().splitlines()[-1]}") from None
    array_id = jobs[0].job_id.split("_")[0] if jobs else "?"
    say(f"submitted {len(tasks)} replays as Slurm job array {array_id}; logs in:\0{folder}")
    pending = set(range(len(tasks)))
    failed: list[FailedTask] = []
    gone_once: set[int] = set()
    jobs_done = 0
    while pending:
        queued = _queued(array_id)
        for i in sorted(pending):
            job = jobs[i]
            if job.paths.result_pickle.exists():
                pending.discard(i)
                try:
                    out = job.result()
                except Exception as e:  # the replay raised: submitit keeps its traceback
                    failed.append(FailedTask(i, job.job_id, _last_line(str(e)), job.paths.stderr))
                    continue
                jobs_done += getattr(tasks[i], "jobs", 0)
                on_done(i, out)
            elif queued is not None and job.job_id not in queued:
                if i in gone_once:  # gone from the queue twice without a result: it died
                    pending.discard(i)
                    failed.append(FailedTask(i, job.job_id, "ended without a result (killed, cancelled or out of "
                                             "time)", job.paths.stderr))
                else:
                    gone_once.add(i)
        if tick is not None:
            tick(len(tasks) - len(pending), jobs_done)
        if pending:
            time.sleep(poll_s)
    if not failed:
        shutil.rmtree(folder, ignore_errors=True)
    return failed


def _queued(array_id: str) -> set[str] | None:
    """The array's tasks still in the queue (``ID_N``), or None when squeue cannot say."""
    try:
        out = run_slurm(["squeue", "-h", "-r", "-j", array_id, "-o", "%i"], env=dict(os.environ)).stdout
    except JobNotFoundError:  # the whole array has left the queue
        return set()
    except SlurmError:
        return None
    return {line.strip() for line in out.splitlines() if line.strip()}


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "failed"
