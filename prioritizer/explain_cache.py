"""Which explanations a cycle rebuilds, and the per-cycle numbers of every job.

Building a job's whole explanation (each factor's score, the order key, its preemption kind)
costs about as much as scoring it again; at 100,000 jobs that was most of a cycle, and writing
them all most of the rest. But for a job that still waits, those parts barely move between
cycles: what moves is its rank, score, SiteFactor, what it waits for and its account's usage.

So each cycle computes the cheap numbers (:data:`NUMBER_KEYS`) for every job and rebuilds the
slow part only for:

- jobs it has not explained yet (new jobs, and all of them in the daemon's first cycle);
- jobs whose own record changed (state, GPUs, class, restarts, deadline, account, nodes, or
  attained service doubled);
- the first :data:`TOP_PENDING` waiting jobs (those about to start, and their neighbours);
- jobs in a preemption this cycle or with GPU telemetry notes;
- a rotating share of the rest, so no explanation's factors are more than
  :data:`REFRESH_CYCLES` cycles old; in a queue of more than ``REFRESH_CYCLES x``
  :data:`ROTATE_AT_MOST` jobs the rotation takes about that many per cycle (job ids modulo the
  period: consecutive ids spread evenly), and the bound
  doubles as the queue grows past each step (100 cycles past 25,000 jobs, 400 at 110,000). The
  explain view says how old a job's factors are.

The store writes only the rebuilt parts plus one compact document of numbers.
"""

from __future__ import annotations

from itertools import compress, islice, repeat
from math import frexp
from operator import add, attrgetter, eq, is_, is_not, itemgetter, mod, ne, not_
from typing import Any, Callable, Iterable, Mapping

from slurm_dl.core.model import Job, JobState
from slurm_dl.core.policy.base import PolicyContext
from slurm_dl.core.policy.deadline import slack
from slurm_dl.store import ExplanationParts

TOP_PENDING = 500
REFRESH_CYCLES = 50
ROTATE_AT_MOST = 500
"""Slow parts rebuilt per cycle by the rotation at most: at 110,000 jobs a rotation of 1/50
rebuilt and wrote 2,200 parts per cycle (2,688 parts with the others, 54 MB written per cycle;
773 and 39 MB with this bound), for factors deep in the queue whose ranking's numbers are
current anyway."""

PER_JOB_KEYS = (
    "state",
    "state_reason",
    "score",
    "rank",
    "site_factor",
    "attained_gpu_s",
    "executed_s",
    "restarts",
    "deadline_slack_s",
    "account_usage_gpu_s",
    "usage_half_life_hours",
    "waiting_for",
)
STORED_KEYS = (
    "state",
    "state_reason",
    "score",
    "site_factor",
    "attained_gpu_s",
    "executed_s",
    "restarts",
    "deadline_slack_s",
)
"""The numbers stored per job; a job's rank is its place in the ranked list, and its account's
usage and what it waits for are derived from figures of the cycle (``derive``) on reading."""
PER_CYCLE_KEYS = ("at", "ranked")  # the same for every job of a cycle: stored once
NUMBER_KEYS = PER_CYCLE_KEYS + PER_JOB_KEYS
_STATE_TEXT = {s: s.value for s in JobState}  # an enum's .value is a slow property, read per job
_RECORD = attrgetter(
    "state", "num_gpus", "job_class", "restarts", "deadline", "account", "nodes", "checkpointable"
)
"""What a job's slow part depends on, with its attained service on a doubling scale."""
_EXPONENT = itemgetter(1)
_JOB_ID, _STATE, _STATE_REASON, _DEADLINE, _ACCOUNT = (
    attrgetter(a) for a in ("job_id", "state", "state_reason", "deadline", "account")
)
_ATTAINED, _EXECUTED, _RESTARTS = (
    attrgetter(a) for a in ("attained_gpu_s", "executed_s", "restarts")
)


class ExplanationCache:
    def __init__(
        self,
        top_pending: int = TOP_PENDING,
        refresh_cycles: int = REFRESH_CYCLES,
        rotate_at_most: int = ROTATE_AT_MOST,
    ) -> None:
        self.top_pending = top_pending
        self.refresh_cycles = max(1, refresh_cycles)
        self.rotate_at_most = max(1, rotate_at_most)
        self.records: dict[int, tuple] = {}  # job -> its record when its slow part was last built
        self.parts: dict[int, dict[str, Any]] = {}
        self.noted: set[int] = set()  # jobs whose slow part holds GPU telemetry notes

    def refresh_period(self, jobs: int) -> int:
        """Cycles between two rotating rebuilds of one job's slow part in a queue of ``jobs``:
        ``refresh_cycles`` doubled until ``jobs / period`` is at most ``rotate_at_most`` (the jobs
        the rotation takes per cycle, ids being mostly consecutive). Each period divides the next, so a job whose turn comes every ``p`` cycles still
        gets it within ``max(p, p')`` cycles when the queue's size changes the period to ``p'``."""
        period = self.refresh_cycles
        while -(-jobs // period) > self.rotate_at_most:
            period *= 2
        return period

    def step(
        self,
        order: list[Job],
        ctx: PolicyContext,
        scores: dict[int, float],
        site_factors: Mapping[int, Any],
        free_gpus: int,
        victims_of: dict[int, list[int]],
        cycle_no: int,
        build: Callable[[Job, int], dict[str, Any]],
        always: Iterable[int] = (),
    ) -> ExplanationParts:
        """The cycle's explanations: numbers for every job in ``order`` (ranked; ``site_factors``
        holds waiting jobs' SiteFactor), the slow part rebuilt with ``build(job, rank)`` where
        needed (see the module docstring).

        The numbers are built a column at a time, with C-level maps over the ranked jobs: at
        100,000 jobs that is several times cheaper than a list of values per job."""
        first = not self.records
        always = set(always) | set(victims_of) | {v for vs in victims_of.values() for v in vs}
        now, led = ctx.now, ctx.ledger
        pending_state = JobState.PENDING
        n = len(order)
        ids = list(map(_JOB_ID, order))
        states = list(map(_STATE, order))
        pending = list(map(is_, states, repeat(pending_state)))
        not_waiting = list(compress(range(n), map(not_, pending)))
        site_factor = list(map(site_factors.get, ids))
        for i in not_waiting:  # a running job has no SiteFactor to show
            site_factor[i] = None
        deadlines = list(map(_DEADLINE, order))
        slack_s = [None] * n
        for i in compress(range(n), map(is_not, deadlines, repeat(None))):
            slack_s[i] = slack(order[i], now)
        columns = [  # STORED_KEYS; rounded and completed on reading (finish_numbers); C-level maps
            list(map(_STATE_TEXT.__getitem__, states)),
            list(map(_STATE_REASON, order)),
            list(map(scores.get, ids)),
            site_factor,
            list(map(_ATTAINED, order)),
            list(map(_EXECUTED, order)),
            list(map(_RESTARTS, order)),
            slack_s,
        ]
        derive = {  # what completes the numbers: ledger usage per account, free GPUs, victims
            "usage": {
                a: (round(led.usage(a, now), 3) if led is not None else None)
                for a in set(map(_ACCOUNT, order))
            },
            "half_life_hours": led.half_life_s / 3600.0 if led is not None else None,
            "free_gpus": free_gpus,
            "victims": {str(need): sorted(vs) for need, vs in victims_of.items()},
        }
        # which slow parts to rebuild: new or changed jobs, the top waiting ones, the rotation,
        # and ``always``; per job only C-level maps (this runs over every job each cycle)
        refresh, records, parts = self.refresh_period(n), self.records, self.parts
        # a job's record (_RECORD) and its attained service on a doubling scale (the binary
        # exponent of 1 + attained): a running job's LAS factor is rebuilt as it grows
        recs = list(
            zip(map(_RECORD, order), map(_EXPONENT, map(frexp, map(add, columns[4], repeat(1.0)))))
        )
        if first:
            todo: Iterable[int] = range(n)
        else:
            wanted = set(compress(range(n), map(ne, recs, map(records.get, ids))))  # new or changed
            wanted.update(islice(compress(range(n), pending), self.top_pending))
            wanted.update(
                compress(
                    range(n), map(eq, map(mod, ids, repeat(refresh)), repeat(-cycle_no % refresh))
                )
            )
            if always:
                rank_of = dict(zip(ids, range(n)))
                wanted.update(rank_of[j] for j in always if j in rank_of)
            todo = sorted(wanted)
        rebuilt: dict[int, dict[str, Any]] = {}
        for rank in todo:
            j = order[rank]
            full = build(j, rank)
            slow = {k: v for k, v in full.items() if k not in NUMBER_KEYS}
            parts[j.job_id] = slow
            records[j.job_id] = recs[rank]
            rebuilt[j.job_id] = slow
            if "gpu_utilisation" in slow:
                self.noted.add(j.job_id)
            else:
                self.noted.discard(j.job_id)
        gone = sorted(records.keys() - set(ids))  # (a set difference: records holds every job)
        for j in gone:
            del records[j]
            parts.pop(j, None)
            self.noted.discard(j)
        return ExplanationParts(
            keys=STORED_KEYS,
            ids=ids,
            columns=columns,
            rebuilt=rebuilt,
            gone=gone,
            replace_all=first,
            per_cycle={"at": now, "ranked": len(order)},
            derive=derive,
        )
