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
  :data:`REFRESH_CYCLES` cycles old.

The store writes only the rebuilt parts plus one compact document of numbers.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from slurm_dl.core.explain import waiting_reason
from slurm_dl.core.model import Job, JobState
from slurm_dl.core.policy.base import PolicyContext
from slurm_dl.core.policy.deadline import slack
from slurm_dl.store import ExplanationParts

TOP_PENDING = 500
REFRESH_CYCLES = 50

PER_JOB_KEYS = ("state", "state_reason", "score", "rank", "site_factor", "attained_gpu_s", "executed_s",
                "restarts", "deadline_slack_s", "account_usage_gpu_s", "waiting_for")
PER_CYCLE_KEYS = ("at", "ranked")  # the same for every job of a cycle: stored once
NUMBER_KEYS = PER_CYCLE_KEYS + PER_JOB_KEYS
_STATE_TEXT = {s: s.value for s in JobState}  # an enum's .value is a slow property, read per job


def _record(j: Job) -> tuple:
    # Attained service on a doubling scale (floor of log2(1 + attained), from the integer's bits:
    # cheaper than log2): a running job's LAS factor is rebuilt as it grows.
    a = j.attained_gpu_s
    return (j.state, j.num_gpus, j.job_class, j.restarts, j.deadline, j.account, j.nodes,
            j.checkpointable, int(1.0 + a).bit_length() if a > 0.0 else 0)


class ExplanationCache:
    def __init__(self, top_pending: int = TOP_PENDING, refresh_cycles: int = REFRESH_CYCLES) -> None:
        self.top_pending = top_pending
        self.refresh_cycles = max(1, refresh_cycles)
        self.records: dict[int, tuple] = {}  # job -> _record when its slow part was last built
        self.parts: dict[int, dict[str, Any]] = {}

    def step(self, order: list[Job], ctx: PolicyContext, scores: dict[int, float], site_factor_of: Callable[[Job], Any],
             free_gpus: int, victims_of: dict[int, list[int]], cycle_no: int, half_life_s: float,
             build: Callable[[Job, int], dict[str, Any]], always: Iterable[int] = ()) -> ExplanationParts:
        """The cycle's explanations: numbers for every job in ``order`` (ranked), the slow part
        rebuilt with ``build(job, rank)`` where needed (see the module docstring)."""
        first = not self.records
        always = set(always) | set(victims_of) | {v for vs in victims_of.values() for v in vs}
        led = ctx.ledger
        usage_of: dict[str, float | None] = {}
        numbers: dict[int, list[Any]] = {}
        rebuilt: dict[int, dict[str, Any]] = {}
        pending_rank = 0
        refresh, top_n, records, parts = self.refresh_cycles, self.top_pending, self.records, self.parts
        waiting_text: dict[tuple, str] = {}
        now, state_text = ctx.now, _STATE_TEXT
        pending_state = JobState.PENDING
        scores_get, records_get = scores.get, records.get
        for rank, j in enumerate(order):
            jid, account = j.job_id, j.account
            usage = usage_of.get(account, -1.0)
            if usage == -1.0:
                usage = usage_of[account] = (round(led.usage(account, now, half_life_s), 3)
                                             if led is not None else None)
            state = j.state
            pending = state is pending_state
            if not pending:
                waiting = ""
            elif jid in victims_of:
                waiting = waiting_reason(j, free_gpus, victims_of[jid])
            else:
                wkey = (j.num_gpus, j.state_reason)
                waiting = waiting_text.get(wkey)
                if waiting is None:
                    waiting = waiting_text[wkey] = waiting_reason(j, free_gpus)
            # the values of PER_JOB_KEYS, rounded as explain_job rounds them (inline: run per job)
            score, deadline = scores_get(jid), j.deadline
            numbers[jid] = [state_text[state], j.state_reason, None if score is None else round(score, 6), rank,
                            site_factor_of(j), round(j.attained_gpu_s, 3), round(j.executed_s, 3), j.restarts,
                            None if deadline is None else round(slack(j, now), 3), usage, waiting]
            rec = _record(j)
            if pending:
                top = pending_rank < top_n
                pending_rank += 1
            else:
                top = False
            if first or top or records_get(jid) != rec or jid in always or (jid + cycle_no) % refresh == 0:
                full = build(j, rank)
                slow = {k: v for k, v in full.items() if k not in NUMBER_KEYS}
                parts[jid] = slow
                records[jid] = rec
                rebuilt[jid] = slow
        gone = [j for j in self.records if j not in numbers]
        for j in gone:
            del self.records[j]
            self.parts.pop(j, None)
        return ExplanationParts(keys=PER_JOB_KEYS, numbers=numbers, rebuilt=rebuilt, gone=gone, replace_all=first,
                                per_cycle={"at": ctx.now, "ranked": len(order)})
