"""The simulator's per-job state (mutable, engine-private) and the preemption-cost rules."""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass

from ...core.model import Job, JobState


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job) if f.init)
_job_values = operator.attrgetter(*_JOB_FIELDS)


def _copy_job(job: Job) -> Job:
    """A shallow copy of ``job`` (what ``copy.copy`` gives, several times quicker for a slotted
    dataclass, which ``copy`` takes apart through ``__reduce_ex__``)."""
    return Job(*_job_values(job))


class SimJob:
    """One trace job inside the engine. Times in trace seconds; work in seconds at full speed.

    ``job`` is the engine's own copy of the trace's model Job (the trace stays untouched, so
    several policies can replay it): the engine keeps its ``state``, ``start_time`` (of the
    current run), ``attained_gpu_s`` / ``executed_s`` (as of the last stop; the ranker brings
    a running job's figures up to ``now``) and ``duration`` (the trace duration plus the
    preemption costs added so far — the total run time an oracle would know) current for the
    policy core."""

    __slots__ = (
        "seq",
        "job",
        "gpus",
        "submit",
        "duration",
        "remaining",
        "running",
        "seg_start",
        "speed",
        "attained0",
        "executed0",
        "preemptions",
        "alloc",
        "first_start",
        "queue_s",
        "pend_since",
        "end_time",
        "version",
        "account",
        "deadline",
        "static_key",
        "pend_key",
        "charged_to",
        "served0",
        "charge",
        "width",
        "rates",
    )

    def __init__(self, seq: int, job: Job):
        self.seq = seq
        self.job = job = _copy_job(job)
        job.state = JobState.PENDING
        job.start_time = None
        job.attained_gpu_s = 0.0
        job.executed_s = 0.0
        job.restarts = 0
        self.gpus = job.num_gpus
        self.submit = job.submit_time
        self.duration = float(job.duration or 0.0)
        job.duration = self.duration
        self.remaining = self.duration
        self.running = False
        self.seg_start = 0.0
        self.speed = 1.0
        self.attained0 = 0.0  # GPU-seconds attained before the current run segment
        self.executed0 = 0.0  # wall seconds executed before the current run segment
        self.preemptions = 0
        self.alloc: tuple[tuple[int, int], ...] = ()
        self.first_start: float | None = None
        self.queue_s = 0.0
        self.pend_since = self.submit
        self.end_time: float | None = None
        self.version = 0
        self.account = job.account
        self.deadline = job.deadline
        self.static_key: tuple = ()
        self.pend_key: tuple = ()  # its key in the sorted pending queue
        self.charged_to = 0.0  # usage charged to the ledger up to this time (fair share)
        # GPU types (see slurm_dl.sim.engine.typed): ``charge`` is the speed of the type the job runs on
        # (1.0 on one type), ``served0`` the seconds of service charged before the current run
        # segment (run seconds × charge), ``width`` its GPUs × charge (what usage is charged at),
        # ``rates`` its speed on each node group (None on one type)
        self.served0 = 0.0
        self.charge = 1.0
        self.width = self.gpus
        self.rates: tuple[float, ...] | None = None

    # --- views at time ``now`` --------------------------------------------------------------
    def attained(self, now: float) -> float:
        if self.running:
            return self.attained0 + self.gpus * (now - self.seg_start)
        return self.attained0

    def executed(self, now: float) -> float:
        if self.running:
            return self.executed0 + (now - self.seg_start)
        return self.executed0

    def remaining_at(self, now: float) -> float:
        if self.running:
            return self.remaining - (now - self.seg_start) * self.speed
        return self.remaining


@dataclass(frozen=True, slots=True)
class PreemptionCost:
    """What a preemption costs a job, added to its remaining work (as Helios does).

    ``restart_s``: a fixed restart delay in seconds, or ``None`` for the Helios rule (7 s for
    1 GPU, 30 s for 2–8 GPUs, 60 s above). ``checkpoint_interval_s``: when set, the work done
    since the last periodic checkpoint of the current run is lost as well (periodic checkpoints
    every interval from the run's start); when ``None``, the job checkpoints on the preemption
    signal and loses nothing (Helios).
    """

    restart_s: float | None = 0.0
    checkpoint_interval_s: float | None = None

    @classmethod
    def parse(cls, text: str, checkpoint_interval_s: float | None = None) -> "PreemptionCost":
        t = str(text).strip().lower()
        if t == "helios":
            return cls(None, checkpoint_interval_s)
        try:
            v = float(t)
        except ValueError:
            raise ValueError(
                f"--preempt-cost: got {text!r}; allowed: seconds (≥ 0) or 'helios'"
            ) from None
        if v < 0:
            raise ValueError(f"--preempt-cost: got {text!r}; allowed: seconds (≥ 0) or 'helios'")
        return cls(v, checkpoint_interval_s)

    def restart(self, gpus: int) -> float:
        if self.restart_s is not None:
            return self.restart_s
        return 7.0 if gpus == 1 else 30.0 if gpus <= 8 else 60.0

    def lost_work(self, run_seconds: float) -> float:
        if not self.checkpoint_interval_s:
            return 0.0
        return run_seconds % self.checkpoint_interval_s

    def describe(self) -> str:
        base = "helios (7/30/60 s)" if self.restart_s is None else f"{self.restart_s:g} s"
        if self.checkpoint_interval_s:
            base += f" + work since last checkpoint (every {self.checkpoint_interval_s:g} s)"
        return base


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The scheduler's own overheads, which a replay otherwise leaves out (none by default).

    ``release_s``: a finished job's GPUs are usable again this long after its end (Slurm: the
    job completing, its epilog, the node reporting back). ``pass_s``: scheduling passes run
    only every this many seconds (Slurm's ``sched_interval`` / ``bf_interval``); 0 = at every
    event. On a live Slurm the two add up, per start, to the gap between GPUs coming free in
    the recorded history and the next job starting on them; :func:`~slurm_dl.sim.engine.overhead.
    estimate_dispatch` reads it off an imported history."""

    release_s: float = 0.0
    pass_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("release_s", "pass_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 3600):
                raise ValueError(f"{name}: got {v!r}; allowed: 0 to 3600 seconds")

    @property
    def active(self) -> bool:
        return bool(self.release_s or self.pass_s)

    def describe(self) -> str:
        if not self.active:
            return "none"
        parts = []
        if self.release_s:
            parts.append(f"GPUs free {self.release_s:g} s after a job ends")
        if self.pass_s:
            parts.append(f"a scheduling pass every {self.pass_s:g} s")
        return "; ".join(parts)
