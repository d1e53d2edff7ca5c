"""Choose preemption victims for one waiting job (pure).

Rules, in the order they are applied:

* **opt-in** — a running job can be a victim only if it can resume (:func:`resume_kind`): it
  declared a checkpoint handler and is requeueable, or (where the site allows it) it is
  requeueable and may restart from the beginning. Never a task of the same job array as the
  waiting job (a sweep must not churn itself);
* **eligibility** — a victim's class must be preemptible
  (``config.classes[...].preemptible``), it must have run at least ``min_runtime_seconds`` in its
  current run, it has been restarted fewer than ``max_restarts`` times, and the waiting job's
  score beats its score by at least ``hysteresis`` (scores in [0, 1], from the policy);
* **gang-aware** — a victim is always removed whole (all its nodes); the waiting job's parts
  (whole nodes for multi-node jobs, see :mod:`slurm_dl.core.packing`) are freed node by node, inside
  one leaf switch when the topology allows;
* **cheapest** — victims are taken per node in this preference: recently checkpointed first
  (``ledger.jobs[id].last_checkpoint_signal`` within ``checkpoint_recent_seconds``), then the
  lowest score, then fewer GPUs, then job id; the node whose freeing costs least is chosen
  (GPUs of not-recently-checkpointed victims, then GPUs wasted beyond the need, then summed
  victim score, then node index); unneeded victims are dropped at the end; among the candidate
  plans (one per leaf switch, one over all nodes) the one with the fewest switches wins, then
  the same costs over the whole plan;
* **deterministic** — every choice ends in a tie-break by index or job id;
* **preferred victims** — jobs in ``prefer_victims`` (the prioritizer's jobs deprioritized for
  idle GPUs) are taken before any other: on each node and over the whole plan, GPUs of other
  victims cost more than theirs. They skip the hysteresis test (their score says nothing about
  the GPUs they waste) but keep the other eligibility rules. An empty set changes nothing.

Each victim carries a reason; each running job that could not be a victim says why in
``PreemptionPlan.skipped``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, Sequence

from .model import Job, Node, Topology
from .packing import PackingPlan, job_allocation, job_parts, pack

if TYPE_CHECKING:
    from .config import SiteConfig
    from .policy.base import PolicyContext, PriorityPolicy

_DEFAULT_PREEMPTIBLE = {
    "train": True,
    "inference": True,
    "sweep": True,
    "serve": False,
    "interactive": False,
}


@dataclass(frozen=True, slots=True)
class Victim:
    job_id: int
    num_gpus: int
    nodes: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """Victims to preempt (none when the job already fits) and where the waiting job then goes."""

    job_id: int
    victims: tuple[Victim, ...]
    placement: PackingPlan
    gpus_freed: int
    gpus_wasted: int
    skipped: tuple[tuple[int, str], ...] = ()

    @property
    def victim_ids(self) -> tuple[int, ...]:
        return tuple(v.job_id for v in self.victims)


def _settings(config: "SiteConfig | None"):
    if config is None:
        from .config import PreemptionConfig

        return PreemptionConfig()
    return config.preemption


def _preemptible(job: Job, config: "SiteConfig | None") -> bool:
    if config is None:
        return _DEFAULT_PREEMPTIBLE.get(job.job_class.value, True)
    return config.class_config(job.job_class).preemptible


RESUME_CHECKPOINT = "checkpoint"
"""Signalled, given the grace period to checkpoint, then requeued: resumes from its checkpoint."""
RESUME_REQUEUE = "requeue"
"""Requeued without a signal (only where the site allows it): restarts from the beginning."""
RESUME_NEVER = "never"
"""Never signalled or requeued by slurm-dl; still ordered by priority."""


def resume_kind(job: Job, config: "SiteConfig | None" = None) -> tuple[str, str]:
    """How slurm-dl may preempt ``job`` (one of the ``RESUME_*`` values) and why, in words."""
    if not _preemptible(job, config):
        return RESUME_NEVER, f"class {job.job_class.value} is not preemptible"
    if job.requeue is False:
        return RESUME_NEVER, "the job is not requeueable (Requeue=0)"
    if job.checkpointable:
        where = "its steps" if job.signal_target == "steps" else "its batch script"
        return RESUME_CHECKPOINT, f"it declared a checkpoint handler in {where} (dl:ckpt)"
    if job.requeue and _settings(config).requeue_without_signal:
        return RESUME_REQUEUE, (
            "it declared no checkpoint handler but is requeueable, and the site "
            "requeues such jobs (they restart from the beginning)"
        )
    return RESUME_NEVER, "it declared no checkpoint handler (dl:ckpt=1 with --requeue)"


STARTABLE_REASONS = frozenset({"", "None", "Resources", "Priority"})
"""Slurm's reasons for a pending job that would start if GPUs were free: none given yet, waiting
for resources, or behind jobs of higher priority."""
ELIGIBLE_SLACK_S = 60.0


def waits_only_for_gpus(job: Job, now: float) -> bool:
    """Whether freeing GPUs could start ``job`` now. A held job, one whose begin time is still
    ahead, one waiting on a dependency, a limit, a reservation or a partition's state would not
    start on freed GPUs, so no running job is ever preempted for it."""
    if not job.pending or job.state_reason not in STARTABLE_REASONS:
        return False
    return job.eligible_time is None or job.eligible_time <= now + ELIGIBLE_SLACK_S


def same_array(a: Job, b: Job) -> bool:
    return a.array_job_id is not None and a.array_job_id == b.array_job_id


def _ineligible(
    job: Job,
    waiting_score: float,
    score: float,
    now: float,
    config,
    pc,
    preferred: bool = False,
    waiting_job: Job | None = None,
) -> str | None:
    if not job.nodes:
        return "holds no known nodes"
    kind, why = resume_kind(job, config)
    if kind == RESUME_NEVER:
        return why
    if waiting_job is not None and same_array(job, waiting_job):
        return f"a task of the waiting job's own array {job.array_job_id}"
    ran = now - job.start_time if job.start_time is not None else job.executed_s
    if ran < pc.min_runtime_seconds:
        return f"ran {ran:.0f} s < minimum runtime {pc.min_runtime_seconds:.0f} s"
    if max(job.restarts, job.preemptions) >= pc.max_restarts:
        return f"restarted {max(job.restarts, job.preemptions)} times (cap {pc.max_restarts})"
    if not preferred and not (
        waiting_score > score and waiting_score - score >= pc.hysteresis - 1e-12
    ):
        return f"score {score:.3f} not beaten by {waiting_score:.3f} with hysteresis {pc.hysteresis:.3f}"
    return None


def plan_preemption(
    waiting_job: Job,
    running_jobs: Sequence[Job],
    nodes: Sequence[Node],
    topology: Topology | None,
    ctx: "PolicyContext",
    config: "SiteConfig | None" = None,
    *,
    scores: Mapping[int, float] | None = None,
    policy: "PriorityPolicy | None" = None,
    prefer_victims: frozenset[int] | set[int] = frozenset(),
) -> PreemptionPlan | None:
    """Victims among ``running_jobs`` that let ``waiting_job`` start, or ``None`` when
    preemption is disabled or no allowed set of victims makes room.

    ``scores`` (job id → urgency in [0, 1]) decide hysteresis and victim preference; without
    them they are computed with ``policy.scores`` over the waiting and running jobs.
    ``prefer_victims``: job ids to take first (see the module docstring).
    """
    pc = _settings(config)
    if not pc.enabled:
        return None
    fits = pack(waiting_job, nodes, topology)
    if fits is not None:
        return PreemptionPlan(waiting_job.job_id, (), fits, 0, 0)
    if scores is None:
        if policy is None:
            raise ValueError("plan_preemption needs scores or a policy to compute them")
        scores = policy.scores([waiting_job, *running_jobs], ctx)
    now = ctx.now
    ws = scores.get(waiting_job.job_id, 0.0)
    led = ctx.ledger

    def recent(job: Job) -> bool:
        rec = led.jobs.get(job.job_id) if led is not None else None
        t = rec.last_checkpoint_signal if rec is not None else None
        return t is not None and 0.0 <= now - t <= pc.checkpoint_recent_seconds

    eligible: dict[int, Job] = {}
    skipped: list[tuple[int, str]] = []
    for j in sorted(running_jobs, key=lambda j: j.job_id):
        why = _ineligible(
            j,
            ws,
            scores.get(j.job_id, 0.0),
            now,
            config,
            pc,
            j.job_id in prefer_victims,
            waiting_job,
        )
        if why is None:
            eligible[j.job_id] = j
        else:
            skipped.append((j.job_id, why))
    if not eligible:
        return None
    alloc = {jid: job_allocation(j) for jid, j in eligible.items()}
    prefer = frozenset(prefer_victims)

    def unpreferred(
        jid: int, gpus: int
    ) -> int:  # GPUs that count against a plan when some are preferred
        return 0 if not prefer or jid in prefer else gpus

    pref = {
        jid: (
            0 if jid in prefer else 1,
            0 if recent(j) else 1,
            scores.get(jid, 0.0),
            j.num_gpus,
            jid,
        )
        for jid, j in eligible.items()
    }
    on_node: dict[str, list[int]] = {}
    for jid in sorted(eligible, key=pref.__getitem__):
        for n in alloc[jid]:
            on_node.setdefault(n, []).append(jid)

    index = {n.name: i for i, n in enumerate(nodes)}
    parts = sorted(job_parts(waiting_job, nodes), reverse=True)
    leaf = topology.leaf_of() if topology is not None and not topology.empty else {}
    groups: list[list[Node]] = []
    if leaf and len(parts) > 1:
        by_sw: dict[str, list[Node]] = {}
        for n in nodes:
            if n.name in leaf:
                by_sw.setdefault(leaf[n.name], []).append(n)
        groups.extend(by_sw.values())
    groups.append(list(nodes))

    best: tuple | None = None
    for group in groups:
        chosen = _free_parts(
            parts,
            group,
            waiting_job.gpu_type,
            on_node,
            alloc,
            eligible,
            pref,
            recent,
            index,
            unpreferred,
        )
        if chosen is None:
            continue
        plan = _finish(waiting_job, chosen, nodes, topology, alloc, eligible, pref)
        if plan is None:
            continue
        cost = (
            len(plan[1].switches),
            sum(unpreferred(v, eligible[v].num_gpus) for v in plan[0]),
            sum(eligible[v].num_gpus for v in plan[0] if not recent(eligible[v])),
            plan[2],
            sum(scores.get(v, 0.0) for v in plan[0]),
            len(plan[0]),
            tuple(sorted(plan[0])),
        )
        if best is None or cost < best[0]:
            best = (cost, plan)
    if best is None:
        return None
    victims_ids, placement, wasted, freed = best[1]
    victims = tuple(
        Victim(
            v,
            eligible[v].num_gpus,
            tuple(alloc[v]),
            _reason(
                eligible[v],
                waiting_job,
                ws,
                scores.get(v, 0.0),
                now,
                recent(eligible[v]),
                pc,
                v in prefer,
            ),
        )
        for v in victims_ids
    )
    return PreemptionPlan(waiting_job.job_id, victims, placement, freed, wasted, tuple(skipped))


def _free_parts(
    parts,
    group,
    gpu_type,
    on_node,
    alloc,
    eligible,
    pref,
    recent,
    index,
    unpreferred=lambda jid, gpus: 0,
) -> set[int] | None:
    """Greedy, part by part (largest first): the node whose freeing costs least."""
    free = {n.name: n.gpus_free for n in group}
    victims: set[int] = set()
    used_nodes: set[str] = set()
    for part in parts:
        best = None
        for n in group:
            if n.name in used_nodes or not n.available or n.gpus < part:
                continue
            if gpu_type is not None and n.gpu_type != gpu_type:
                continue
            have = free[n.name]
            for v in victims:
                have += alloc[v].get(n.name, 0)
            take: list[int] = []
            for jid in on_node.get(n.name, []):
                if have >= part:
                    break
                if jid in victims:
                    continue
                take.append(jid)
                have += alloc[jid][n.name]
            if have < part:
                continue
            cost = (  # GPUs counted on this node; a gang's other GPUs may serve later parts
                sum(unpreferred(j, alloc[j][n.name]) for j in take),
                sum(alloc[j][n.name] for j in take if not recent(eligible[j])),
                sum(alloc[j][n.name] for j in take),
                sum(pref[j][2] for j in take),
                index.get(n.name, 0),
            )
            if best is None or cost < best[0]:
                best = (cost, n.name, take)
        if best is None:
            return None
        used_nodes.add(best[1])
        victims.update(best[2])
    return victims


def _apply(nodes: Sequence[Node], victims, alloc) -> list[Node]:
    freed: dict[str, int] = {}
    for v in victims:
        for n, g in alloc[v].items():
            freed[n] = freed.get(n, 0) + g
    return [
        replace(n, gpus_used=max(0, n.gpus_used - freed[n.name])) if n.name in freed else n
        for n in nodes
    ]


def _finish(waiting_job, victims: set[int], nodes, topology, alloc, eligible, pref):
    """Check the placement, drop victims not needed (least preferred first), measure waste."""
    if pack(waiting_job, _apply(nodes, victims, alloc), topology) is None:
        return None
    kept = sorted(victims, key=pref.__getitem__)
    for v in sorted(victims, key=pref.__getitem__, reverse=True):
        trial = [x for x in kept if x != v]
        if pack(waiting_job, _apply(nodes, trial, alloc), topology) is not None:
            kept = trial
    placement = pack(waiting_job, _apply(nodes, kept, alloc), topology)
    freed = sum(eligible[v].num_gpus for v in kept)
    free_before = {n.name: n.gpus_free for n in nodes}
    from_victims = sum(max(0, g - free_before.get(n, 0)) for n, g in placement.allocation)
    return tuple(sorted(kept, key=pref.__getitem__)), placement, max(0, freed - from_victims), freed


def _reason(
    victim: Job,
    waiting: Job,
    ws: float,
    vs: float,
    now: float,
    recent: bool,
    pc,
    preferred: bool = False,
) -> str:
    ran = now - victim.start_time if victim.start_time is not None else victim.executed_s
    ck = "checkpointed recently" if recent else "no recent checkpoint"
    why = (
        f"its GPUs sit idle (deprioritized), score {vs:.3f} vs {ws:.3f}"
        if preferred
        else f"score {vs:.3f} < {ws:.3f} by >= {pc.hysteresis:.3f}"
    )
    return (
        f"job {victim.job_id} ({victim.job_class.value}, {victim.num_gpus} GPUs on {','.join(victim.nodes)}) "
        f"yields to job {waiting.job_id}: {why}; "
        f"ran {ran:.0f} s >= {pc.min_runtime_seconds:.0f} s; restarts {victim.restarts} < {pc.max_restarts}; {ck}"
    )
