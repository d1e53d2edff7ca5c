"""Which pending jobs need a preemption this cycle; victims come from ``slurm_dl.core.preemption``.

The daemon's part: take the most urgent pending jobs (by score) that have no preemption in
flight, offer as victims running jobs that are not already victims this cycle and whose
preemption Slurm has not refused in their current run, and turn each :class:`~slurm_dl.core.preemption.PreemptionPlan` with victims into a
:class:`~prioritizer.preempt.PreemptionIntent` with a reason. Eligibility (minimum runtime,
restart cap, preemptible classes, hysteresis), gang-awareness and victim preference are the
pure planner's, and so is the opt-in rule: only jobs that can resume are ever victims.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from slurm_dl.core.config import SiteConfig
from slurm_dl.core.model import ClusterSnapshot, Job, JobState
from slurm_dl.core.policy import PolicyContext
from slurm_dl.core.preemption import plan_preemption, waits_only_for_gpus

from .preempt import PreemptionIntent

MAX_NEEDS_PER_CYCLE = 3
"""How many of the most urgent pending jobs may start a preemption in one cycle."""


def plan_intents(
    snap: ClusterSnapshot,
    jobs: Sequence[Job],
    scores: Mapping[int, float],
    config: SiteConfig,
    ctx: PolicyContext,
    *,
    busy_needs: frozenset[int] = frozenset(),
    prefer_victims: frozenset[int] = frozenset(),
    refused: frozenset[tuple[int, int]] = frozenset(),
) -> list[PreemptionIntent]:
    """Preemptions to start this cycle for the most urgent pending jobs that cannot start for want
    of GPUs alone (never for a held job, one with a begin time ahead, a dependency or a limit).

    ``prefer_victims``: running jobs deprioritized for idle GPUs, taken first.
    ``refused``: (job, restart count) of runs whose signal or requeue Slurm refused."""
    pending = sorted(
        (j for j in jobs if waits_only_for_gpus(j, snap.taken_at) and j.num_gpus > 0 and j.job_id not in busy_needs),
        key=lambda j: (-scores[j.job_id], j.submit_time, j.job_id),
    )
    running = [j for j in jobs if j.state is JobState.RUNNING and (j.job_id, j.restarts) not in refused]
    taken: set[int] = set()
    intents: list[PreemptionIntent] = []
    for need in pending[:MAX_NEEDS_PER_CYCLE]:
        offer = [j for j in running if j.job_id not in taken]
        plan = plan_preemption(need, offer, snap.nodes, snap.topology, ctx, config, scores=scores,
                               prefer_victims=prefer_victims)
        if plan is None or not plan.victims:
            continue
        taken.update(plan.victim_ids)
        reason = (
            f"job {need.job_id} (score {scores[need.job_id]:.3f}, {need.num_gpus} GPU(s)) cannot start on free GPUs; "
            + "; ".join(v.reason for v in plan.victims)
        )
        intents.append(PreemptionIntent(need.job_id, plan.victim_ids, reason))
    return intents
