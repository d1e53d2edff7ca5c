"""Deadline admission (as in Chronus): a deadline is honoured only if the cluster can meet it
next to the deadlines it has already promised.

The promise is made once, when the job is first seen (the prioritizer's first cycle with the job,
the simulator's arrival); the prioritizer keeps its answers in its ledger, so a restart changes
none of them (:meth:`DeadlineAdmission.to_dict`, :meth:`DeadlineAdmission.restore`). A job whose deadline is admitted keeps it; a job whose deadline does
not fit is *demoted*: it runs as best effort (never boosted for the deadline) and its owner is
told why. Demotion never takes GPUs from anyone, so a deadline the cluster cannot meet no longer
pushes back best-effort work on its way to being missed anyway.

The check is the earliest-deadline-first demand test on the committed work. For every admitted
deadline ``D`` not yet past (and the new one), the GPU-seconds still owed to deadline jobs due
by ``D`` must fit in ``capacity × (D - now)``. A job owes ``GPUs × its remaining requested
run time`` (an array's pending record: that for each waiting task, whose waves at its throttle
must also end by the deadline; a task split off it keeps the array's answer): its time limit less what it has run (:func:`~.deadline.remaining_run`), never its
real run time, so asking for a short limit to get in only gets the job ended at that limit, and
asking for a long one only makes it harder to admit.

``capacity`` is the cluster's GPUs less what is kept for best-effort work: at most
``(1 - share) × GPUs`` (``policy.deadline.admission_share``), and no more than the GPUs that
jobs submitted without a deadline hold or wait for right now. With no best-effort work about,
deadlines may promise the whole cluster; under a flood of it, ``share`` of it.

A job that cannot start, held (``sbatch --hold``, ``scontrol hold``/``uhold``, ``requeuehold``)
or waiting on a dependency that can never be met (``DependencyNeverSatisfied``), owes nothing
while it cannot start: its answer is dropped, its work is not in the demand others are tested
against, and its GPUs are not in the best-effort reserve either. When it can start again it is
tested again as a newcomer (:meth:`DeadlineAdmission.step`): after the jobs that arrived
meanwhile, one released job after another in submission order, so releasing many jobs at once
buys none of them a place ahead of anyone; a job that still fits is promised its deadline again,
one that no longer does is demoted and told it was tested again after its hold. The jobs on
hold are kept with the answers, so a restart changes none of this.

Soft deadlines (utility steps, ``Job.soft_deadlines``: (time, value) with values falling) are
admitted at their first step that fits; the job then aims at that step, and the steps before it
are given up. A job that fits at no step is demoted like a hard one.

Pure: no clock; the caller passes ``now`` and the cluster's GPU count.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..model import Job
from .deadline import remaining_run

Remaining = Callable[[Job, float], float | None]

NEVER_SATISFIED = "DependencyNeverSatisfied"
"""Slurm's reason for a pending job whose dependency can never be met: it never starts."""


def on_hold(job: Job) -> str | None:
    """``"hold"`` for a held pending job, ``"dependency"`` for one whose dependency can never be
    met (neither can start until someone acts), else None."""
    if not job.state_reason or not job.pending:  # (the simulator's jobs have no reason)
        return None
    if job.held:
        return "hold"
    return "dependency" if job.state_reason == NEVER_SATISFIED else None


def _hm(seconds: float) -> str:
    m = max(0, round(seconds / 60.0))
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min"


def demand_fits(
    owed: Iterable[tuple[float, float]], new: tuple[float, float], now: float, capacity_gpus: float
) -> tuple[bool, str]:
    """The EDF demand test: ``owed`` are (deadline, GPU-seconds) already promised, ``new`` the
    candidate. True when every deadline ``D ≥`` the candidate's still has its work (and the
    candidate's) within ``capacity_gpus × (D - now)``. Returns ``(ok, reason)``."""
    d_new, w_new = new
    if capacity_gpus <= 0:
        return False, "no GPUs are set aside for deadlines"
    items = sorted(owed)
    i = bisect.bisect_right(items, (d_new, float("inf")))
    before = sum(w for _, w in items[:i])
    total = before + w_new
    if total > capacity_gpus * (d_new - now):
        return False, (
            f"deadlines already promised fill {_hm(before / capacity_gpus)} of the GPUs "
            f"set aside for deadlines before it, this job would add "
            f"{_hm(w_new / capacity_gpus)}, and only {_hm(d_new - now)} are left"
        )
    for d, w in items[i:]:
        total += w
        if total > capacity_gpus * (d - now):
            return False, (
                f"it would make an earlier-admitted deadline ({_hm(d - now)} away) "
                f"impossible to keep"
            )
    return True, "fits"


@dataclass
class DeadlineAdmission:
    """The promises made so far (job id → admitted deadline) and the demotions (job id → why).

    The simulator calls :meth:`decide` at each arrival and :meth:`forget` when a job ends; the
    prioritizer calls :meth:`step` each cycle with the live jobs. ``remaining`` computes a job's
    remaining requested run time (default :func:`~.deadline.remaining_run`)."""

    share: float = 1.0
    remaining: Remaining = remaining_run
    admitted: dict[int, float] = field(default_factory=dict)
    demoted: dict[int, str] = field(default_factory=dict)
    arrays: set[int] = field(default_factory=set)  # decided for an array's waiting tasks
    held: dict[int, str] = field(default_factory=dict)
    """Deadline jobs that cannot start (job id → :func:`on_hold`'s kind): no answer, owe nothing."""
    _jobs: dict[int, Job] = field(default_factory=dict)
    _restored: set[int] = field(
        default_factory=set
    )  # admitted before a restart, job not seen since

    def _owed(self, now: float) -> list[tuple[float, float]]:
        out = []
        lapsed = []
        for jid, j in self._jobs.items():
            d = self.admitted[jid]
            r = self.remaining(j, now) or 0.0
            if now + r > d:
                # past, or can no longer make it (for good: a waiting job's slack only shrinks,
                # a running one's stays): promises no more work, the policy drops it below
                # best effort
                lapsed.append(jid)
                continue
            out.append((d, j.num_gpus * r * j.array_tasks))
        for jid in lapsed:
            del self._jobs[jid]
        return out

    def capacity(self, total_gpus: int, best_effort_gpus: int | None) -> float:
        """GPUs deadlines may promise: all but the best-effort reserve (see the module)."""
        reserve = (1.0 - self.share) * total_gpus
        if best_effort_gpus is not None:
            reserve = min(reserve, max(0, best_effort_gpus))
        return total_gpus - reserve

    def decide(
        self,
        job: Job,
        now: float,
        total_gpus: int,
        best_effort_gpus: int | None = None,
        *,
        inherit: bool = True,
    ) -> str | None:
        """Admit or demote ``job``'s deadline (once; later calls return the first answer).
        None: admitted (or no deadline); else the reason it was demoted. ``best_effort_gpus``:
        GPUs held or wanted by live jobs submitted without a deadline (None: not known, the
        full reserve is kept). ``inherit=False``: a task split off a decided array is tested
        on its own (a task released from a hold) instead of taking the array's answer."""
        jid = job.job_id
        if jid in self.admitted or jid in self.demoted:
            return self.demoted.get(jid)
        if not candidate_deadlines(job):
            return None
        parent = job.array_job_id
        if inherit and parent is not None and parent != jid and parent in self.arrays:
            # a task split off its array's pending record: the array's answer, made for all its tasks
            if parent in self.demoted:
                self.demoted[jid] = self.demoted[parent]
                return self.demoted[jid]
            self.admitted[jid] = self.admitted[parent]
            self._jobs[jid] = job
            return None
        why = self._try(job, now, total_gpus, best_effort_gpus)
        if why is not None:
            self.demoted[jid] = why
        if job.array_tasks > 1:
            self.arrays.add(jid)
        return why

    def _try(
        self, job: Job, now: float, total_gpus: int, best_effort_gpus: int | None
    ) -> str | None:
        """Promise ``job`` its first deadline that fits (recorded) and return None, or why none fits."""
        r = self.remaining(job, now)
        if r is None:
            return "it has no time limit to plan it with"
        cap = self.capacity(total_gpus, best_effort_gpus)
        if job.num_gpus > total_gpus:
            return f"it needs {job.num_gpus} GPUs and the cluster has {total_gpus}"
        tasks = job.array_tasks
        at_once = min(
            tasks, job.array_throttle or tasks, max(1, total_gpus // max(1, job.num_gpus))
        )
        waves = -(-tasks // max(1, at_once))  # an array runs its tasks in waves
        owed = self._owed(now)
        why = "no deadline"
        for d in candidate_deadlines(job):
            if now + r * waves > d:
                why = (
                    f"its time limit ({_hm(r)}) ends after the deadline ({_hm(d - now)} away)"
                    if waves == 1
                    else f"its {tasks} tasks, {at_once} at a time, need {_hm(r * waves)} and the deadline "
                    f"is {_hm(d - now)} away"
                )
                continue
            ok, why = demand_fits(owed, (d, job.num_gpus * r * tasks), now, cap)
            if ok:
                self.admitted[job.job_id] = d
                self._jobs[job.job_id] = job
                return None
        return why

    def to_dict(self) -> dict:
        """The promises and demotions, JSON-able (the daemon keeps them in its ledger)."""
        out = {
            "admitted": {str(j): d for j, d in self.admitted.items()},
            "demoted": {str(j): why for j, why in self.demoted.items()},
            "arrays": sorted(self.arrays),
        }
        if self.held:  # (absent when none: what older daemons saved reads the same)
            out["held"] = {str(j): kind for j, kind in self.held.items()}
        return out

    def restore(self, data: dict) -> None:
        """Take back what :meth:`to_dict` saved (a restarted daemon): each job keeps the answer it
        was given; an admitted job's promise counts again from its next :meth:`step`. Raises
        ValueError on data of another shape."""
        try:
            admitted = {int(j): float(d) for j, d in (data.get("admitted") or {}).items()}
            demoted = {int(j): str(why) for j, why in (data.get("demoted") or {}).items()}
            arrays = {int(j) for j in (data.get("arrays") or [])}
            held = {int(j): str(kind) for j, kind in (data.get("held") or {}).items()}
        except (AttributeError, TypeError, ValueError) as e:
            raise ValueError(f"saved deadline admission does not match its format: {e}") from None
        self.admitted.update(admitted)
        self.demoted.update(demoted)
        self.arrays.update(arrays)
        self.held.update(held)
        self._restored.update(admitted)

    def _drop(self, job_id: int) -> None:
        """Take back the job's answer (its promise no longer counts)."""
        self.admitted.pop(job_id, None)
        self.demoted.pop(job_id, None)
        self.arrays.discard(job_id)
        self._jobs.pop(job_id, None)
        self._restored.discard(job_id)

    def forget(self, job_id: int) -> None:
        self._drop(job_id)
        self.held.pop(job_id, None)

    def step(self, jobs: Iterable[Job], now: float, total_gpus: int) -> dict[int, str]:
        """The prioritizer's cycle: forget jobs no longer live, set aside deadline jobs that
        cannot start (:attr:`held`, their answers dropped), decide new deadline jobs in
        submission order and then the ones that can start again (released), and return
        ``{job_id: why}`` for every live demoted job. Admitted jobs' records are refreshed
        (their run time so far changes)."""
        live = {j.job_id: j for j in jobs}
        for jid in [j for j in (*self.admitted, *self.demoted, *self.held) if j not in live]:
            self.forget(jid)
        for jid in self._jobs:
            self._jobs[jid] = live[jid]
        for jid in [j for j in self._restored if j in live]:  # restored promises count again
            self._jobs[jid] = live[jid]
        self._restored.clear()
        answered = self.admitted.keys() | self.demoted.keys()
        released: dict[int, str] = {}
        best_effort = 0
        for j in live.values():
            jid = j.job_id
            kind = on_hold(j)
            asks = j.deadline is not None or bool(j.soft_deadlines)
            if kind is not None and (asks or jid in answered or jid in self.held):
                self._drop(jid)  # owes nothing until it can start: tested again then
                self.held[jid] = kind
            elif jid in self.held:
                released[jid] = self.held.pop(jid)
            if kind is None and (not asks or not candidate_deadlines(j)):
                best_effort += j.num_gpus * j.array_tasks  # a held job wants no GPUs now
        asking = sorted(
            (
                j
                for j in live.values()
                if (j.deadline is not None or j.soft_deadlines) and j.job_id not in self.held
            ),
            key=lambda j: (j.job_id in released, j.submit_time, j.job_id),
        )
        for j in asking:
            if j.job_id not in released:
                self.decide(j, now, total_gpus, best_effort)
                continue
            why = self.decide(
                j, now, total_gpus, best_effort, inherit=False
            )  # in turn, as a newcomer
            if why is not None:
                after = (
                    "after its hold was released"
                    if released[j.job_id] == "hold"
                    else "once its dependency could be met"
                )
                self.demoted[j.job_id] = f"{after}, {why}"
        return {jid: why for jid, why in self.demoted.items()}


def candidate_deadlines(job: Job) -> list[float]:
    """What admission may promise: the hard deadline, or the soft steps in order."""
    if job.deadline is not None:
        return [job.deadline]
    return [t for t, v in job.soft_deadlines if v > 0]


def held_message(kind: str) -> str:
    """The text a user reads about the deadline of a job that cannot start (:func:`on_hold`)."""
    if kind == "hold":
        return (
            "deadline set aside while the job is held: it takes no room from other "
            "deadlines, and is tested again when the hold is released"
        )
    return (
        "deadline set aside while the job's dependency can never be met: it takes no "
        "room from other deadlines, and is tested again if that changes"
    )


def demotion_message(why: str) -> str:
    """The text a user reads about a demoted deadline (explain, the prioritizer's log)."""
    return (
        f"deadline not admitted: {why}; the job runs as best effort "
        f"(a later deadline or a shorter --time may be admitted)"
    )


def admitted_now(
    candidate: Job, jobs: Iterable[Job], now: float, total_gpus: int, share: float
) -> str | None:
    """Would ``candidate``'s deadline be admitted at ``now``, next to the live jobs ``jobs`` (a
    snapshot of the queue, deadlines read from their tags)? None: yes; else why not. The
    prioritizer's own answers are not visible outside it, so each deadline job of the snapshot
    is tested as a newcomer in submission order (as a daemon without saved answers would),
    then the candidate, submitted ``now``: the same :class:`DeadlineAdmission` test."""
    admission = DeadlineAdmission(share)
    admission.step([*jobs, candidate], now, total_gpus)
    return admission.demoted.get(candidate.job_id)
