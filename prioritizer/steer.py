"""Steering waiting jobs between GPU types: the daemon's part.

The decision is the pure core's (:func:`slurm_dl.core.steering.choose_types`, the same rule the
simulator's type-aware choice follows); here it is applied with Slurm's own levers, only where
it changes something: a pending job's partition (``scontrol update JobId=N Partition=h100``) or,
where the site has no partition of one type, its features. A job that names one type, or
accepts one, is never touched; nothing outside a job's accepted types is ever set.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from slurm_dl.core.config import SiteConfig
from slurm_dl.core.errors import SlurmError
from slurm_dl.core.rights import refused_for_rights
from slurm_dl.core.model import ClusterSnapshot, Job
from slurm_dl.core.steering import (
    Lever,
    ShardChoice,
    TypeChoice,
    choose_shard_nodes,
    choose_types,
    type_levers,
)
from slurm_dl.core.throughput import RunRecord, ThroughputModel

log = logging.getLogger("slurm_dl.prioritizer")


class SteerBackend(Protocol):
    def set_partition(self, job_id: int, partition: str) -> None: ...
    def set_features(self, job_id: int, features: str) -> None: ...


@dataclass(slots=True)
class SteerReport:
    moved: dict[int, str] = field(default_factory=dict)  # job -> the type it was steered to
    choices: dict[int, TypeChoice] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    tried: int = 0  # moves asked of Slurm
    refused: dict[int, tuple[str, str]] = field(default_factory=dict)
    """job -> (lever, why) for each move Slurm refused for lack of rights (its user lacks
    operator rights, or the filter's shim does not trust it)."""


def refusal_words(gpu_type: str, error: str) -> str:
    """What explain, the log and the decision record say of a move Slurm refused."""
    text = error.strip().splitlines()[0] if error.strip() else "refused"
    return (
        f"not moved to {gpu_type}: Slurm refused the change ({text}); the prioritizer's "
        "user needs operator rights and the filter's trust (slurm-dl doctor)"
    )


class Steering:
    """The site's throughput model (with what the ledger's finished runs teach it) and levers."""

    def __init__(self, config: SiteConfig) -> None:
        self.base = ThroughputModel.from_config(config)
        self.model = self.base
        self.levers: dict[str, Lever] = type_levers(
            config.node_groups, [p.name for p in config.partitions]
        )
        self._runs_seen = -1

    @property
    def speeds(self) -> dict[str, float]:
        """GPU type -> default speed: what a GPU-second is charged at on that type."""
        return {t: self.base.type_speed(t) for t in self.base.types}

    def learn(self, runs: Sequence[tuple[str, str, str, float]]) -> None:
        """Re-learn the speedups when the ledger's finished runs changed."""
        if len(runs) != self._runs_seen:
            self._runs_seen = len(runs)
            self.model = self.base.learn(RunRecord(*r) for r in runs)

    def wanted(self, job: Job, gpu_type: str) -> tuple[str, str] | None:
        """("partition"|"features", value) that keeps ``job`` to ``gpu_type``; None: it already is."""
        lever = self.levers.get(gpu_type)
        if lever is None:
            return None
        if lever.partition is not None:
            return None if job.partition == lever.partition else ("partition", lever.partition)
        feature = lever.feature or gpu_type
        return None if job.features == feature else ("features", feature)


def steer(
    steering: Steering,
    backend: SteerBackend,
    snap: ClusterSnapshot,
    order: Sequence[Job],
    *,
    dry_run: bool = False,
    running: Sequence[Job] = (),
) -> SteerReport:
    """Decide and apply the type of every waiting job that accepts several (``order``: the
    pending jobs, most urgent first; ``running``: whose rates count in the means)."""
    report = SteerReport()
    accepted: Mapping[int, tuple[str, ...]] = {
        j.job_id: j.accepted_types for j in order if j.accepted_types
    }
    if not any(len(t) > 1 for t in accepted.values()):
        return report
    report.choices = choose_types(
        order, snap.nodes, steering.model, accepted, running, now=snap.taken_at
    )
    by_id = {j.job_id: j for j in order}
    for job_id, choice in report.choices.items():
        job = by_id[job_id]
        if choice.gpu_type not in job.accepted_types:  # never outside the set (a guard on the core)
            continue
        change = steering.wanted(job, choice.gpu_type)
        if change is None:
            continue
        report.moved[job_id] = choice.gpu_type
        if dry_run:
            continue
        report.tried += 1
        try:
            if change[0] == "partition":
                backend.set_partition(job_id, change[1])
            else:
                backend.set_features(job_id, change[1])
        except SlurmError as e:  # it ran meanwhile, or Slurm refused: the next cycle decides again
            report.moved.pop(job_id, None)
            report.errors.append(f"steering job {job_id} to {choice.gpu_type}: {e}")
            said = e.stderr or str(e)
            if refused_for_rights(said):
                report.refused[job_id] = (change[0], refusal_words(choice.gpu_type, _gist(said)))
            continue
        log.info("job %d steered to %s: %s", job_id, choice.gpu_type, choice.why)
    return report


class ShardSteering:
    """Waiting shard jobs steered to the node whose shared GPUs they fill (``ReqNodeList``),
    before Slurm opens a whole GPU for them elsewhere. Remembers which jobs it pinned, to change
    a pin only when the choice changes and to let a job it pinned go anywhere again when no node
    has room now."""

    def __init__(self, config: SiteConfig) -> None:
        groups = {g.name: g for g in config.node_groups}
        self.shards_per_gpu: dict[str, int] = {}
        for sg in config.sharing.groups:
            g = groups.get(sg.node_group)
            if g is not None and sg.shards_per_gpu:
                for name in g.node_names:
                    self.shards_per_gpu[name] = sg.shards_per_gpu
        self.pinned: dict[int, str] = {}

    def step(
        self, backend, snap: ClusterSnapshot, order: Sequence[Job], *, dry_run: bool = False
    ) -> tuple[dict[int, ShardChoice], list[str]]:
        """Decide and apply; returns the choices that changed a pin, and errors."""
        waiting = [j for j in order if j.shards > 0]
        live = {j.job_id for j in waiting}
        self.pinned = {j: n for j, n in self.pinned.items() if j in live}
        if not waiting or not self.shards_per_gpu:
            return {}, []
        used: dict[str, dict[int, int]] = {}
        for a in backend.gpu_allocations():
            if a.shards and a.node in self.shards_per_gpu:
                for g in a.gpus:
                    used.setdefault(a.node, {})[g] = used.get(a.node, {}).get(
                        g, 0
                    ) + a.shards // len(a.gpus)
        choices = choose_shard_nodes(waiting, snap.nodes, self.shards_per_gpu, used)
        changed: dict[int, ShardChoice] = {}
        errors: list[str] = []
        for job in waiting:
            choice = choices.get(job.job_id)
            target = choice.node if choice is not None else ""
            if self.pinned.get(job.job_id, "") == target:
                continue
            if choice is None and job.job_id not in self.pinned:
                continue  # never pinned by us: nothing to undo
            if not dry_run:
                try:
                    backend.set_nodes(job.job_id, target)
                except (
                    SlurmError
                ) as e:  # it started meanwhile, or Slurm refused: decided again next cycle
                    errors.append(f"steering shard job {job.job_id} to {target or 'any node'}: {e}")
                    continue
            if choice is None:
                del self.pinned[job.job_id]
                continue
            self.pinned[job.job_id] = target
            changed[job.job_id] = choice
            log.info("shard job %d steered to %s: %s", job.job_id, target, choice.why)
        return changed, errors


def _gist(text: str) -> str:
    """Slurm's own words in an error (``scontrol update: slurm_update error: X`` -> X)."""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    return line.rsplit(": ", 1)[-1].strip() or line


def gpu_type_entry(
    job: Job, model: ThroughputModel, choice: TypeChoice | None, refused: str | None = None
) -> dict:
    """The explanation's GPU-type part: what the job accepts, its speed on each with the
    evidence, and (waiting) the type chosen for it and why."""
    speeds = model.speeds(job)
    entry: dict = {
        "accepted": list(job.accepted_types),
        "speeds": {
            t: {
                "speed": round(speeds[t].value, 4),
                "source": speeds[t].source,
                "samples": speeds[t].samples,
            }
            for t in job.accepted_types
            if t in speeds
        },
    }
    if job.gpu_type and job.running:
        entry["running_on"] = job.gpu_type
    if choice is not None:
        entry["chosen"] = choice.gpu_type
        entry["why"] = choice.why
    if refused:
        entry["refused"] = refused
    return entry
