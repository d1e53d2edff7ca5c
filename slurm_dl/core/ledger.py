"""The ledger: attained GPU-time per job, decayed usage per account, finished-job history.

Pure: every method takes ``now`` and never reads a clock; the prioritizer's store persists it
with :meth:`Ledger.to_dict` / :meth:`Ledger.from_dict`, the simulator keeps one in memory.

* A running job accrues ``num_gpus × (now - last_seen)`` GPU-seconds of attained service and
  the same GPU-seconds of usage to its account.
* Attained service never decreases: a requeued job keeps what it had (Tiresias' 2D-LAS
  counts all runs), and a snapshot that reports less is ignored for that job.
* A job that leaves the snapshot is closed as of when it was last seen (the daemon's cycle is
  short); one that shows a finished state is accrued up to ``now`` first. A job closed only
  because it was missing and that shows up alive again (a snapshot taken mid-requeue) is
  reopened with its attained service and its history entry withdrawn (:meth:`Ledger.reopen`).
  Jobs that left one snapshot close in job id order (nothing depends on the order records
  were made in: a restarted daemon reads them back by id). Closing puts its total GPU-seconds
  into ``history`` (Gittins' global table) and ``finished`` (one :class:`~slurm_dl.core.policy.history.Finished` record per job,
  with the key fields Slurm accounting has, in finishing order: what the history learner of
  Gittins and QSSF reads).
* Account usage decays exponentially with a half-life: ``u(t) = u(t0) · 2^(-(t - t0)/h)``.
  The ledger owns ``h`` (:attr:`Ledger.half_life_s`): it is not saved with the ledger (it is
  the site's setting, ``[policy.fairshare] half_life_hours``), and whoever loads a ledger sets
  it from the site config.
* A pending job's waiting time (``JobRecord.waited_s``, LAS's starvation guard reads it) grows
  only while it waits to run: pending, not held (``Job.held``) and past its eligible time.
  Slurm sets the eligible time again when a held job is released (and after a requeue), so a
  job released since the last snapshot counts from then; one held at any snapshot counts
  nothing up to it; a job first seen waiting counts from its submit or eligible time, whichever
  is later. The record keeps it as a stretch (``waited_before_s`` up to ``wait_from``, then
  ``last_seen - wait_from``), so that a job that keeps waiting leaves its record unchanged
  and the store rewrites only records that changed (:meth:`Ledger.changed_rows`).
"""

from __future__ import annotations

import math
from operator import attrgetter
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Mapping

from .config.policy import FairShareConfig
from .model import HELD_REASONS, Job, JobState
from .policy.history import Finished

PENDING = JobState.PENDING

HISTORY_KEPT = 200_000
"""Gittins' global sample keeps the latest this many finished jobs (a daemon that runs for years
would otherwise grow it, and write it each cycle, without end); trimmed by a tenth at a time."""
FINISHED_KEPT = 20_000
"""The history learner reads only recent jobs; older finished records are dropped
(``finished_dropped`` counts them, so readers can follow the log incrementally)."""


def decay(value: float, dt: float, half_life_s: float) -> float:
    if dt <= 0.0:
        return value
    return value * math.pow(2.0, -dt / half_life_s)


def half_life_of(config: Any) -> float:
    """The usage half-life in seconds that a site config (None: the defaults) sets."""
    fs = config.policy.fairshare if config is not None else FairShareConfig()
    return fs.half_life_hours * 3600.0


def _remove_last(values: list[float], value: float) -> None:
    for i in range(len(values) - 1, -1, -1):
        if values[i] == value:
            del values[i]
            return


class EntryLog(list):
    """A list that grows at its end and is trimmed at its front (the history, the finished
    records, the runs), counting both, so that a store can write only what changed:
    ``dropped`` entries have left its front (the place of its first entry in the whole log),
    ``edits`` counts every other change and ``edited`` holds the places (in the whole log) of
    the latest :data:`EDITS_KEPT` of them: everything from the lowest onwards may have
    changed. Appending is the plain list's, at its speed."""

    __slots__ = ("dropped", "edits", "edited", "__weakref__")

    def __init__(self, items=(), dropped: int = 0) -> None:
        super().__init__(items)
        self.dropped = dropped
        self.edits = 0
        self.edited: list[int] = []

    def _edit(self, at: int) -> None:
        self.edits += 1
        self.edited.append(self.dropped + min(max(at, 0), len(self)))
        if len(self.edited) > EDITS_KEPT:
            del self.edited[0]

    def _place(self, key) -> int:
        """Where an index or slice of this list starts (the lowest place it touches)."""
        n = len(self)
        if isinstance(key, slice):
            r = range(*key.indices(n))
            return min(r) if r else key.indices(n)[0]
        return key + n if key < 0 else key

    def __delitem__(self, key) -> None:
        n = len(self)
        if isinstance(key, slice) and key.step in (None, 1) and key.start in (None, 0):
            front = len(range(*key.indices(n)))
        elif isinstance(key, int) and (key == 0 or key == -n):
            front = 1 if n else 0
        else:
            front = -1
            at = self._place(key)
        super().__delitem__(key)
        if front >= 0:
            self.dropped += front
        else:
            self._edit(at)

    def __setitem__(self, key, value) -> None:
        at = self._place(key)
        super().__setitem__(key, value)
        self._edit(at)

    def insert(self, index, value) -> None:
        at = self._place(index)
        super().insert(index, value)
        self._edit(at)

    def pop(self, index=-1):
        at = self._place(index)
        value = super().pop(index)
        self._edit(at)
        return value

    def remove(self, value) -> None:
        at = self.index(value)
        super().remove(value)
        self._edit(at)

    def clear(self) -> None:
        super().clear()
        self._edit(0)

    def sort(self, *args, **kwargs) -> None:
        super().sort(*args, **kwargs)
        self._edit(0)

    def reverse(self) -> None:
        super().reverse()
        self._edit(0)

    def __imul__(self, n):
        super().__imul__(n)
        self._edit(0)
        return self

    def __reduce__(self):
        return (_entry_log, (list(self), self.dropped, self.edits, list(self.edited)))


EDITS_KEPT = 64
"""The places of this many latest edits an :class:`EntryLog` remembers (a store that saw more
edits since its last save rewrites the log)."""


def _entry_log(items: list, dropped: int, edits: int = 0, edited: list | None = None) -> EntryLog:
    log = EntryLog(items, dropped)
    log.edits = edits
    log.edited = list(edited or ())
    return log


LOGS = ("history", "finished", "runs")
"""The ledger's :class:`EntryLog` attributes, which a store may keep apart from its document
(``Ledger.to_dict(logs=False)``)."""


@dataclass(slots=True)
class JobRecord:
    job_id: int
    user: str = ""
    account: str = ""
    name: str = ""
    num_gpus: int = 0
    partition: str = ""
    time_limit: float | None = None
    attained_base_gpu_s: float = 0.0  # attained service before the current stretch of running
    executed_base_s: float = 0.0  # run time before it
    restarts: int = 0
    last_seen: float = 0.0
    running: bool = False
    last_checkpoint_signal: float | None = None
    preemptions: int = (
        0  # times slurm-dl preempted it, however each went (requeued by itself or not)
    )
    finished: bool = False
    closed_gone: bool = False  # closed because it left the snapshot (may come back: requeue)
    waited_before_s: float | None = (
        None  # seconds waited before the current stretch (None: not counted yet)
    )
    wait_from: float | None = (
        None  # when the current stretch of waiting began to count (None: not waiting)
    )
    gpu_type: str = ""  # the GPU type it last ran on
    norm_executed_base_s: float = 0.0  # run time × the speed of the type it ran on, before it
    run_from: float | None = (
        None  # when the current stretch of running began to count (None: none open)
    )
    run_rate: float = (
        0.0  # GPU-seconds of service per second in that stretch (GPUs × the type's speed)
    )
    run_speed: float = 1.0  # the speed of the type it runs on in that stretch
    checkpoint_s: float | None = None  # its checkpoint time, learnt from its preemptions
    lost_work: int = 0  # preemptions whose requeue came before its checkpoint finished

    # Service and run time up to ``last_seen``: what came before the stretch it runs in now plus
    # that stretch, so that a job that keeps running leaves its record as it was (like waiting).
    @property
    def attained_gpu_s(self) -> float:
        start = self.run_from
        if start is None:
            return self.attained_base_gpu_s
        return self.attained_base_gpu_s + self.run_rate * (self.last_seen - start)

    @attained_gpu_s.setter
    def attained_gpu_s(self, value: float) -> None:
        self.fold()
        self.attained_base_gpu_s = value

    @property
    def executed_s(self) -> float:
        start = self.run_from
        return (
            self.executed_base_s
            if start is None
            else self.executed_base_s + (self.last_seen - start)
        )

    @executed_s.setter
    def executed_s(self, value: float) -> None:
        self.fold()
        self.executed_base_s = value

    @property
    def norm_executed_s(self) -> float:
        """Run time × the speed of the type it ran on (a cluster of several types)."""
        start = self.run_from
        if start is None:
            return self.norm_executed_base_s
        return self.norm_executed_base_s + self.run_speed * (self.last_seen - start)

    @norm_executed_s.setter
    def norm_executed_s(self, value: float) -> None:
        self.fold()
        self.norm_executed_base_s = value

    def fold(self, keep_open: bool = True) -> None:
        """Move the open stretch of running into the figures before it, as of ``last_seen``; it
        goes on from there (``keep_open``) or ends."""
        start = self.run_from
        if start is None:
            return
        ran = self.last_seen - start
        if ran:
            self.attained_base_gpu_s += self.run_rate * ran
            self.executed_base_s += ran
            self.norm_executed_base_s += self.run_speed * ran
        self.run_from = self.last_seen if keep_open else None

    @property
    def waiting(self) -> bool:
        """It was waiting to run when last seen."""
        return self.wait_from is not None

    @property
    def waited_s(self) -> float | None:
        """Seconds waiting to run as of ``last_seen`` (None: not counted yet). Kept as a stretch
        that began at ``wait_from`` rather than a sum moved on every cycle, so that a job that
        keeps waiting leaves its record as it was (the store writes changed records only)."""
        before = self.waited_before_s
        if before is None or self.wait_from is None:
            return before
        return before + (self.last_seen - self.wait_from)


@dataclass(slots=True)
class AccountUsage:
    account: str
    usage_gpu_s: float = 0.0
    updated_at: float = 0.0


_JOB_FIELDS = tuple(f.name for f in fields(JobRecord))
_job_values = attrgetter(*_JOB_FIELDS)  # one C call per record when saving
_LAST_SEEN = _JOB_FIELDS.index("last_seen")
_values_but_last_seen = attrgetter(*(f for f in _JOB_FIELDS if f != "last_seen"))


def _row(values: Any, width: int) -> Any:
    """A saved job record's row of values, checked to hold one value per field name."""
    if not isinstance(values, (list, tuple)) or len(values) != width:
        raise TypeError(
            f"a job record has {len(values) if isinstance(values, (list, tuple)) else 'no'} values "
            f"for {width} field names"
        )
    return values


_SUMS_KEPT_BEFORE = (
    ("attained_gpu_s", "attained_base_gpu_s"),
    ("executed_s", "executed_base_s"),
    ("norm_executed_s", "norm_executed_base_s"),
)


def _by_name(values: dict[str, Any]) -> JobRecord:
    """A job record from its fields by name; one saved before waiting and running were kept as
    stretches (sums as of ``last_seen``: ``waited_s`` with ``waiting``, ``attained_gpu_s``,
    ``executed_s``, ``norm_executed_s``) becomes the same figures, a stretch of waiting open
    where it waited; a running job's stretch opens at its next sighting."""
    if "waited_s" in values or "waiting" in values or "attained_gpu_s" in values:
        values = dict(values)
        for old, new in _SUMS_KEPT_BEFORE:
            if old in values:
                values[new] = values.pop(old)
        if "waited_s" in values or "waiting" in values:
            waited, waiting = values.pop("waited_s", None), values.pop("waiting", False)
            values["waited_before_s"] = waited
            if waiting and waited is not None:
                values["wait_from"] = values.get("last_seen", 0.0)
    return JobRecord(**values)


MAX_RUNS = 20_000  # finished runs kept for the speedups the throughput model learns


def _waiting(job: Job, now: float) -> bool:
    """Whether ``job`` waits to run now: pending, not held, past its eligible time (Slurm gives
    none while a dependency or a hold keeps it back)."""
    return (
        job.pending and not job.held and job.eligible_time is not None and job.eligible_time <= now
    )


def _count_wait(rec: JobRecord, job: Job, now: float) -> None:
    """Count the time ``job`` waited since ``rec`` last saw it (before ``last_seen`` moves on):
    open, keep or close the record's stretch of waiting."""
    waiting = _waiting(job, now)
    start = rec.wait_from
    if waiting:
        eligible = job.eligible_time
        if rec.waited_before_s is None:  # first seen (or counted by an older ledger)
            rec.waited_before_s = 0.0
            rec.wait_from = min(now, max(job.submit_time, eligible))
        elif (
            start is not None
        ):  # waiting then and now; a hold and release between reset the eligible time
            if eligible > rec.last_seen:
                rec.waited_before_s += rec.last_seen - start
                rec.wait_from = eligible
        elif eligible > rec.last_seen and not rec.running:  # released (or eligible) since then
            rec.wait_from = eligible
        else:  # held when last seen and Slurm kept the eligible time, or it ran: nothing known
            rec.wait_from = now if now > rec.last_seen else rec.last_seen
    else:
        if start is not None:
            rec.waited_before_s += rec.last_seen - start
            rec.wait_from = None
        elif rec.waited_before_s is None:
            rec.waited_before_s = 0.0


class Ledger:
    """See the module docstring. ``revision`` grows on every change (policies cache on it)."""

    def __init__(self, half_life_s: float | None = None) -> None:
        self.half_life_s = (
            FairShareConfig().half_life_hours * 3600.0 if half_life_s is None else half_life_s
        )
        self.jobs: dict[int, JobRecord] = {}
        self.accounts: dict[str, AccountUsage] = {}
        self.history: EntryLog = EntryLog()
        self.finished: EntryLog = EntryLog()
        self.finished_dropped = 0
        self.admission: dict[str, Any] = {}
        """Deadline admission's promises and demotions (:class:`~.policy.admission.DeadlineAdmission`
        ``to_dict``), kept here so that a restarted daemon neither breaks a promise nor
        re-decides a demotion."""
        self.finished_withdrawn = 0  # records taken back by reopen (readers start over)
        self.runs: EntryLog = EntryLog()
        """Recent finished runs (user, job name, GPU type, run time): the speedups the
        throughput model learns (the same job name on several types)."""
        self.revision: int = 0
        self.seen_at: float | None = None
        """The latest snapshot's time: every open record was seen then (a record seen at this
        time is saved without its ``last_seen``, see :meth:`changed_rows`)."""

    @property
    def half_life_s(self) -> float:
        """Seconds in which an account's usage halves (fair share reads the decayed usage)."""
        return self._half_life_s

    @half_life_s.setter
    def half_life_s(self, value: float) -> None:
        if not value > 0:  # also NaN
            raise ValueError(f"the usage half-life must be positive, got {value} s")
        self._half_life_s = float(value)

    @classmethod
    def from_config(cls, config: Any) -> "Ledger":
        """An empty ledger with the site config's half-life (``config`` None: the default)."""
        return cls(half_life_s=half_life_of(config))

    # --- accounting ----------------------------------------------------------------------
    def _charge(self, account: str, gpu_s: float, now: float) -> None:
        acc = self.accounts.get(account)
        if acc is None:
            acc = self.accounts[account] = AccountUsage(account, 0.0, now)
        dt = now - acc.updated_at
        # decay() inlined (the simulator charges every account at every event)
        acc.usage_gpu_s = (
            acc.usage_gpu_s * math.pow(2.0, -dt / self._half_life_s)
            if dt > 0.0
            else acc.usage_gpu_s
        ) + gpu_s
        if dt < 0.0:  # max(updated_at, now)
            return
        acc.updated_at = now

    def _charge_many(self, gpus: dict[str, int], dt: float, now: float) -> int:
        """``_charge(a, gpus[a] × dt, now)`` for each account with GPUs, in order
        (the same arithmetic, in one loop: the simulator does this at every event); returns
        how many were charged."""
        accounts = self.accounts
        half_life_s = self._half_life_s
        last_dt = None
        m = 1.0
        n = 0
        for a, g in gpus.items():
            if not g:
                continue
            n += 1
            acc = accounts.get(a)
            if acc is None:
                acc = accounts[a] = AccountUsage(a, 0.0, now)
            d = now - acc.updated_at
            if d > 0.0:
                if d != last_dt:
                    last_dt, m = d, math.pow(2.0, -d / half_life_s)
                acc.usage_gpu_s = acc.usage_gpu_s * m + g * dt
                acc.updated_at = now
            else:
                acc.usage_gpu_s = acc.usage_gpu_s + g * dt
                if d == 0.0:
                    acc.updated_at = now
        return n

    def observe(
        self,
        snapshot_jobs: Iterable[Job],
        now: float,
        speeds: Mapping[str, float] | None = None,
    ) -> None:
        """Account service up to ``now`` from a snapshot of pending and running jobs.
        ``speeds``: GPU type -> speed (a cluster of several types): a GPU-second is charged at
        the speed of the type it ran on, so an H100-hour costs what the work it did is worth."""
        if self.seen_at is None or now > self.seen_at:
            self.seen_at = now
        seen: set[int] = set()
        records = self.jobs
        for job in snapshot_jobs:
            jid = job.job_id
            seen.add(jid)
            rec = records.get(jid)
            if (
                rec is not None
                and (start := rec.wait_from) is not None
                and not rec.running
                and rec.run_from is None
                and not rec.finished
                and job.state is PENDING
                and job.state_reason not in HELD_REASONS
                and (eligible := job.eligible_time) is not None
                and eligible <= now
                and rec.waited_before_s is not None
            ):
                # most of a large queue: a job that waited when last seen and still waits (what
                # _count_wait and the lines below do for it, without the branches that cannot apply)
                last = rec.last_seen
                if eligible > last:  # held and released in between: a new stretch
                    rec.waited_before_s += last - start
                    rec.wait_from = eligible
                if job.num_gpus:
                    rec.num_gpus = job.num_gpus
                if job.restarts > rec.restarts:
                    rec.restarts = job.restarts
                if job.attained_gpu_s > rec.attained_base_gpu_s:  # (no stretch of running open)
                    rec.attained_base_gpu_s = job.attained_gpu_s
                if job.executed_s > rec.executed_base_s:
                    rec.executed_base_s = job.executed_s
                if now > last:
                    rec.last_seen = now
                continue
            if rec is None:
                rec = self.jobs[job.job_id] = JobRecord(
                    job.job_id,
                    job.user,
                    job.account,
                    job.name,
                    job.num_gpus,
                    job.partition,
                    job.time_limit,
                    last_seen=now,
                )
                # A snapshot may already know service from earlier runs (e.g. after a restart).
                rec.attained_base_gpu_s = max(0.0, job.attained_gpu_s)
                rec.executed_base_s = max(0.0, job.executed_s)
            elif rec.finished:
                if not (rec.closed_gone and not job.state.finished):
                    continue
                self.reopen(job.job_id)  # back after missing a snapshot (e.g. mid-requeue)
            if rec.running and now > rec.last_seen:
                # it ran from last_seen to now, in a stretch at one rate (opened again when the
                # rate changes); last_seen moving on below counts the time
                speed = speeds.get(rec.gpu_type, 1.0) if speeds else 1.0
                rate = rec.num_gpus * speed
                if rec.run_from is None or rec.run_rate != rate or rec.run_speed != speed:
                    rec.fold(keep_open=False)
                    if (
                        rec.norm_executed_base_s == 0.0 and rec.executed_base_s > 0.0
                    ):  # kept before speeds were
                        rec.norm_executed_base_s = rec.executed_base_s * speed
                    rec.run_from, rec.run_rate, rec.run_speed = rec.last_seen, rate, speed
                self._charge(rec.account, rate * (now - rec.last_seen), now)
            if job.state.active and job.gpu_type:
                rec.gpu_type = job.gpu_type
            _count_wait(rec, job, now)
            rec.num_gpus = job.num_gpus or rec.num_gpus
            rec.restarts = max(rec.restarts, job.restarts)
            rec.last_seen = max(rec.last_seen, now)
            # Never decrease; take a larger figure the snapshot may carry.
            if job.attained_gpu_s > rec.attained_gpu_s:
                rec.attained_gpu_s = job.attained_gpu_s
            if job.executed_s > rec.executed_s:
                rec.executed_s = job.executed_s
            rec.running = job.state.active
            if not rec.running:
                rec.fold(keep_open=False)
            if job.state.finished:
                self._close(rec)
        records = self.jobs
        gone = [
            job_id for job_id, rec in records.items() if job_id not in seen and not rec.finished
        ]
        for job_id in sorted(
            gone
        ):  # in id order: the ledger never depends on the order of its records
            rec = records[job_id]
            # It ended some time after it was last seen; charge nothing we cannot know.
            self._close(rec)
            rec.closed_gone = True
        self.revision += 1

    def _close(self, rec: JobRecord) -> None:
        rec.fold(keep_open=False)
        rec.finished = True
        rec.running = False
        self.add_history(
            rec.attained_gpu_s,
            rec.user,
            rec.name,
            rec.account,
            rec.num_gpus,
            rec.partition,
            rec.time_limit,
        )
        if rec.gpu_type and rec.executed_s > 0:
            self.runs.append((rec.user, rec.name, rec.gpu_type, rec.executed_s))
            if len(self.runs) > MAX_RUNS:
                del self.runs[: len(self.runs) - MAX_RUNS]

    def reopen(self, job_id: int) -> bool:
        """Undo closing a job (it came back): its attained service stays, its history entry
        is withdrawn. Returns False when there is no finished record to reopen."""
        rec = self.jobs.get(job_id)
        if rec is None or not rec.finished:
            return False
        _remove_last(self.history, rec.attained_gpu_s)
        for i in range(len(self.finished) - 1, -1, -1):
            f = self.finished[i]
            if f.gpu_s == rec.attained_gpu_s and f.user == rec.user and f.name == rec.name:
                del self.finished[i]
                self.finished_withdrawn += 1
                break
        run = (rec.user, rec.name, rec.gpu_type, rec.executed_s)
        for i in range(len(self.runs) - 1, -1, -1):
            if tuple(self.runs[i]) == run:
                del self.runs[i]
                break
        rec.finished = rec.running = rec.closed_gone = False
        self.revision += 1
        return True

    def add_history(
        self,
        gpu_s: float,
        user: str = "",
        name: str = "",
        account: str = "",
        num_gpus: int = 0,
        partition: str = "",
        time_limit: float | None = None,
        batch: str = "",
    ) -> None:
        """Record one finished job's total GPU-seconds (also used by the simulator directly).
        ``batch``: the burst or job array it belonged to (see the history learner)."""
        self.history.append(gpu_s)
        if len(self.history) > HISTORY_KEPT + HISTORY_KEPT // 10:
            del self.history[: len(self.history) - HISTORY_KEPT]
        self.finished.append(
            Finished(
                user,
                account,
                name,
                int(num_gpus or 0),
                partition or "",
                time_limit,
                float(gpu_s),
                batch or "",
            )
        )
        if len(self.finished) > FINISHED_KEPT:
            cut = len(self.finished) - FINISHED_KEPT
            del self.finished[:cut]
            self.finished_dropped += cut
        self.revision += 1

    def forget_finished(self, now: float | None = None, keep_s: float = 0.0) -> int:
        """Drop finished job records (their history stays) last seen more than ``keep_s`` before
        ``now``; returns how many were dropped. Kept a while, a job that comes back (a victim
        requeued after it ended, one out of a snapshot) keeps its attained service."""
        gone = [
            k
            for k, r in self.jobs.items()
            if r.finished and (now is None or now - r.last_seen > keep_s)
        ]
        for k in gone:
            del self.jobs[k]
        if gone:
            self.revision += 1
        return len(gone)

    # --- queries -------------------------------------------------------------------------
    def attained(self, job_id: int) -> float:
        rec = self.jobs.get(job_id)
        return rec.attained_gpu_s if rec is not None else 0.0

    def waited(self, job_id: int) -> float | None:
        """Seconds the job has waited to run (see the module docstring); None when not counted."""
        rec = self.jobs.get(job_id)
        return rec.waited_s if rec is not None else None

    def usage(self, account: str, now: float) -> float:
        """The account's usage at ``now`` in GPU-seconds, decayed with :attr:`half_life_s`."""
        acc = self.accounts.get(account)
        if acc is None:
            return 0.0
        return decay(acc.usage_gpu_s, now - acc.updated_at, self._half_life_s)

    def usage_all(self, now: float) -> dict[str, float]:
        """Every account's :meth:`usage` (``decay`` inlined: fair share reads it per cycle)."""
        out = {}
        pow_ = math.pow
        half_life_s = self._half_life_s
        for a, acc in self.accounts.items():
            dt = now - acc.updated_at
            out[a] = acc.usage_gpu_s * pow_(2.0, -dt / half_life_s) if dt > 0.0 else acc.usage_gpu_s
        return out

    # --- persistence ---------------------------------------------------------------------
    def changed_rows(self, saved: Mapping[int, tuple]) -> tuple[dict[int, tuple], list[int]]:
        """The job records that differ from ``saved`` (job id -> what this method returned for
        it when it was last saved) and the ids of saved records the ledger no longer has.

        What it compares and returns per record: ``(values, last_seen)``, the values of every
        field but ``last_seen`` in field order, and ``last_seen`` itself, or None for an open
        record seen at :attr:`seen_at` (every open record is seen at each snapshot, so a job
        that keeps waiting is unchanged: its wait is a stretch from ``wait_from``, and its
        ``last_seen`` follows the snapshot). :meth:`row` makes the saved row of one."""
        seen = self.seen_at
        get = saved.get
        changed = {}
        for jid, r in self.jobs.items():
            last = r.last_seen
            if last == seen and not r.finished:
                last = None
            values = _values_but_last_seen(r)
            old = get(jid)
            if old is None or old[1] != last or old[0] != values:
                changed[jid] = (values, last)
        jobs = self.jobs
        gone = [j for j in saved if j not in jobs]
        return changed, gone

    @staticmethod
    def row(encoded: tuple) -> list[Any]:
        """One record's saved row (values in the order of ``job_fields``) from what
        :meth:`changed_rows` returned for it; ``last_seen`` None: at ``seen_at``."""
        values, last = encoded
        return [*values[:_LAST_SEEN], last, *values[_LAST_SEEN:]]

    def to_dict(
        self, *, compact: bool = False, jobs: bool = True, logs: bool = True
    ) -> dict[str, Any]:
        """The ledger as plain data. ``compact``: each job record a row of values in the order of
        ``job_fields`` instead of a table. ``jobs=False``: without the job records (the store
        keeps one row per record, see :meth:`changed_rows`; ``from_dict`` takes them as
        ``jobs``, a ``last_seen`` of None meaning ``seen_at``). ``logs=False``: without the
        :data:`LOGS` (the store keeps one row per entry, :meth:`log_entry`; ``from_dict``
        takes them under their names)."""
        values = [self.jobs[j] for j in sorted(self.jobs)] if jobs else ()
        if not jobs:
            records: dict[str, Any] = {"job_fields": list(_JOB_FIELDS)}
        elif compact:
            records = {"job_fields": list(_JOB_FIELDS), "jobs": [_job_values(r) for r in values]}
        else:  # flat: no asdict deepcopy
            records = {"jobs": [dict(zip(_JOB_FIELDS, _job_values(r))) for r in values]}
        d = {
            "version": 1,
            **records,
            "seen_at": self.seen_at,
            "accounts": [asdict(a) for a in self.accounts.values()],
            "finished_dropped": self.finished_dropped,
            "revision": self.revision,
            "admission": self.admission,
        }
        if logs:
            for name in LOGS:
                d[name] = [self.log_entry(name, e) for e in getattr(self, name)]
        return d

    @staticmethod
    def log_entry(name: str, entry: Any) -> Any:
        """One entry of the log ``name`` as plain data, as ``to_dict`` writes it."""
        return entry if name == "history" else list(entry)

    @classmethod
    def from_dict(cls, d: dict[str, Any], half_life_s: float | None = None) -> "Ledger":
        """The ledger ``to_dict`` made, with ``half_life_s`` (None: the default; it is not
        part of the data)."""
        led = cls(half_life_s)
        try:
            names = d.get("job_fields")
            if names is None:  # one table per record
                records = (_by_name(r) for r in d.get("jobs", []))
            elif list(names) == list(_JOB_FIELDS):  # rows, in this version's order
                records = (JobRecord(*_row(r, len(names))) for r in d.get("jobs", []))
            else:  # rows of a version with other or fewer fields: by name
                records = (
                    _by_name(dict(zip(names, _row(r, len(names))))) for r in d.get("jobs", [])
                )
            seen = d.get("seen_at")
            led.seen_at = None if seen is None else float(seen)
            for rec in records:
                if rec.last_seen is None:  # a saved row's "seen at the last snapshot"
                    if led.seen_at is None:
                        raise TypeError(
                            f"job {rec.job_id} was last seen at the last snapshot, "
                            "which has no time"
                        )
                    rec.last_seen = led.seen_at
                led.jobs[rec.job_id] = rec
            for a in d.get("accounts", []):
                acc = AccountUsage(**a)
                led.accounts[acc.account] = acc
        except TypeError as e:
            raise ValueError(f"ledger data does not match its format: {e}") from None
        led.history = EntryLog(map(float, d.get("history", [])))
        # "history_by_key" (per-key lists no policy reads any more) of earlier releases: ignored
        try:
            led.finished = EntryLog(
                Finished(
                    str(f[0]),
                    str(f[1]),
                    str(f[2]),
                    int(f[3]),
                    str(f[4]),
                    None if f[5] is None else float(f[5]),
                    float(f[6]),
                    str(f[7]) if len(f) > 7 else "",
                )
                for f in d.get("finished", [])
            )
        except (TypeError, ValueError, IndexError) as e:
            raise ValueError(f"ledger data does not match its format: finished: {e}") from None
        try:
            led.runs = EntryLog(
                (str(r[0]), str(r[1]), str(r[2]), float(r[3])) for r in d.get("runs", [])
            )
        except (TypeError, ValueError, IndexError) as e:
            raise ValueError(f"ledger data does not match its format: runs: {e}") from None
        led.finished_dropped = int(d.get("finished_dropped", 0))
        led.revision = int(d.get("revision", 0))
        adm = d.get("admission", {})
        if not isinstance(adm, dict):
            raise ValueError("ledger data does not match its format: admission is not a table")
        led.admission = adm
        return led

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ledger):
            return NotImplemented
        return self.to_dict() == other.to_dict()
