"""Which pending jobs need a preemption this cycle; victims come from ``slurm_dl.core.preemption``.

The daemon's part: take the most urgent pending jobs (by score) that have no preemption in
flight, offer as victims running jobs that are not already victims this cycle and whose
preemption Slurm has not refused in their current run, and turn each :class:`~slurm_dl.core.preemption.PreemptionPlan` with victims into a
:class:`~prioritizer.preempt.PreemptionIntent` with a reason. Eligibility (minimum runtime,
restart cap, preemptible classes, hysteresis), gang-awareness and victim preference are the
pure planner's, and so is the opt-in rule: only jobs that can resume are ever victims.

Under the policy ``fairshare`` the needs and their victims come from the fair-share lease
decision (:func:`slurm_dl.core.fairness.plan_fair_preemptions`, the one the simulator runs);
the node-level planner then places each need on its victims' GPUs.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import dataclasses

from slurm_dl.core.config import SiteConfig
from slurm_dl.core.fairness import LeaseSettings, NodeView, plan_fair_preemptions
from slurm_dl.core.model import ClusterSnapshot, Job, JobState
from slurm_dl.core.packing import job_allocation
from slurm_dl.core.policy import PolicyContext
from slurm_dl.core.preemption import plan_preemption, waits_only_for_gpus

from .preempt import PreemptionIntent

MAX_NEEDS_PER_CYCLE = 3
"""How many of the most urgent pending jobs may start a preemption in one cycle."""


def whole_gpu_jobs(jobs: Sequence[Job]) -> list[Job]:
    """The jobs preemption plans with: a job on GPU shards counts as GPUs in the ledger and
    the quotas, but it holds part of a GPU (preempting it frees no whole one) and waits for
    shards, not for GPUs, so it is neither a need nor a victim."""
    return [j for j in jobs if not j.shards]


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
    policy=None,
    in_flight: frozenset[int] = frozenset(),
    speeds=None,
) -> list[PreemptionIntent]:
    """Preemptions to start this cycle for the most urgent pending jobs that cannot start for want
    of GPUs alone (never for a held job, one with a begin time ahead, a dependency or a limit).

    ``prefer_victims``: running jobs deprioritized for idle GPUs, taken first.
    ``refused``: (job, restart count) of runs whose signal or requeue Slurm refused.
    ``policy``: the fair-share lease policy (its needs and victims, see the module docstring);
    ``in_flight``: victims of preemptions under way (their GPUs count as leaving);
    ``speeds``: on several GPU types, the throughput model the steering reads (its
    ``speeds(job)``), so a fair-share need's victims are sought on its fastest type."""
    jobs = whole_gpu_jobs(jobs)
    if policy is not None and getattr(policy, "leases", False):
        return plan_fair_intents(
            snap,
            jobs,
            scores,
            config,
            ctx,
            policy,
            busy_needs=busy_needs,
            refused=refused,
            in_flight=in_flight,
            speeds=speeds,
        )
    pending = sorted(
        (
            j
            for j in jobs
            if waits_only_for_gpus(j, snap.taken_at)
            and j.num_gpus > 0
            and j.job_id not in busy_needs
        ),
        key=lambda j: (-scores[j.job_id], j.submit_time, j.job_id),
    )
    running = [
        j for j in jobs if j.state is JobState.RUNNING and (j.job_id, j.restarts) not in refused
    ]
    taken: set[int] = set()
    intents: list[PreemptionIntent] = []
    for need in pending[:MAX_NEEDS_PER_CYCLE]:
        offer = [j for j in running if j.job_id not in taken]
        plan = plan_preemption(
            need,
            offer,
            snap.nodes,
            snap.topology,
            ctx,
            config,
            scores=scores,
            prefer_victims=prefer_victims,
        )
        if plan is None or not plan.victims:
            continue
        taken.update(plan.victim_ids)
        reason = (
            f"job {need.job_id} (score {scores[need.job_id]:.3f}, {need.num_gpus} GPU(s)) cannot start on free GPUs; "
            + "; ".join(v.reason for v in plan.victims)
        )
        intents.append(PreemptionIntent(need.job_id, plan.victim_ids, reason))
    return intents


def plan_fair_intents(
    snap: ClusterSnapshot,
    jobs: Sequence[Job],
    scores: Mapping[int, float],
    config: SiteConfig,
    ctx: PolicyContext,
    policy,
    *,
    busy_needs: frozenset[int] = frozenset(),
    refused: frozenset[tuple[int, int]] = frozenset(),
    in_flight: frozenset[int] = frozenset(),
    speeds=None,
) -> list[PreemptionIntent]:
    """The fair-share lease decision's moves, placed on nodes by :func:`plan_preemption`.

    Only jobs that wait for GPUs alone count as demand (as in :func:`plan_intents`). Needs with
    a preemption under way count as running (they hold the GPUs they are about to get); victims
    under way count as gone."""
    now = ctx.now
    jobs = whole_gpu_jobs(jobs)
    pending = [
        j
        for j in jobs
        if waits_only_for_gpus(j, snap.taken_at) and j.num_gpus > 0 and j.job_id not in busy_needs
    ]
    coming = [
        dataclasses.replace(j, state=JobState.RUNNING, start_time=now)
        for j in jobs
        if j.pending and j.job_id in busy_needs
    ]
    running = [j for j in jobs if j.state is JobState.RUNNING and j.job_id not in in_flight]
    eligible = [j for j in running if (j.job_id, j.restarts) not in refused]
    by_id = {j.job_id: j for j in jobs}
    free = sum(n.gpus_free for n in snap.nodes)
    # where the GPUs are: free GPUs in pieces on many nodes do not start a one-node job
    where = NodeView(
        size={n.name: n.gpus if n.available else 0 for n in snap.nodes},
        free={n.name: n.gpus_free for n in snap.nodes},
        alloc={j.job_id: tuple(job_allocation(j).items()) for j in running},
        kind={n.name: n.gpu_type for n in snap.nodes if n.gpu_type is not None},
    )
    plan = plan_fair_preemptions(
        pending,
        [*eligible, *coming, *(j for j in running if (j.job_id, j.restarts) in refused)],
        snap.total_gpus(),
        now,
        LeaseSettings.from_config(config),
        config,
        order=lambda j: policy.within_key(j, ctx),
        level=lambda j: policy.level(j, ctx),
        free_gpus=free,
        nodes=where,
        speeds=None if speeds is None else (lambda j: job_type_speeds(speeds, j)),
    )
    intents: list[PreemptionIntent] = []
    taken: set[int] = set()
    for move in plan.moves[:MAX_NEEDS_PER_CYCLE]:
        if not move.victims:
            continue
        need = by_id[move.need]
        placed = None
        for offer_ids in (move.victims, move.candidates):
            offer = [by_id[v] for v in offer_ids if v not in taken]
            placed = plan_preemption(
                need,
                offer,
                snap.nodes,
                snap.topology,
                ctx,
                config,
                scores=scores,
                prefer_victims=frozenset(v.job_id for v in offer),
            )
            if placed is not None and placed.victims:
                break
        if placed is None or not placed.victims:
            continue
        taken.update(placed.victim_ids)
        why = "; ".join(move.reasons[v] for v in placed.victim_ids)
        intents.append(PreemptionIntent(need.job_id, placed.victim_ids, why))
    return intents


def job_type_speeds(model, job: Job) -> dict[str, float]:
    """``job``'s speed on each GPU type it accepts (all when it names none), as the steering
    knows it (``model``: its throughput model, with what the finished runs taught it)."""
    ok = job.accepted_types
    return {t: s.value for t, s in model.speeds(job).items() if not ok or t in ok}
