"""Which GPU type each waiting job should get, and the Slurm lever that steers it there. Pure.

The site's policy decides *who* starts (the order of the waiting jobs); heterogeneity decides
*where*: a job that accepts several GPU types (its tag's ``types``) goes where it runs best
for the cluster, never outside its set. Each decision:

1. **who starts now**: in the policy's order, each job takes room on the fastest of its types
   that has room now (a node with that many free GPUs, or enough whole free nodes);
2. **where**, among the jobs that start now: the ones that gain most from the fast types take
   them first (a job's gain is its speed on its fastest type over its speed on its slowest,
   from the throughput model), as Gavel does with its effective-throughput objective; a job that
   then finds no room falls back to any type with room;
3. **a job that cannot start now** is steered to its fastest type; the next decision moves it
   to a slower one as soon as that one has room and the fast one still has none.

A job that names one type, or accepts one, is never steered.

The lever: a partition that holds only nodes of the type (e.g. ``h100``), else the node
feature named after the type (``--constraint``-style ``Features=h100``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .model import Job, Node
from .throughput import ThroughputModel


@dataclass(frozen=True, slots=True)
class Lever:
    """How to keep a pending job to one GPU type: a partition of that type alone, or a feature."""

    partition: str | None = None
    feature: str | None = None


@dataclass(frozen=True, slots=True)
class TypeChoice:
    job_id: int
    gpu_type: str
    starts_now: bool
    why: str


def type_levers(node_groups: Sequence, partitions: Sequence[str]) -> dict[str, Lever]:
    """For each GPU type of the site config's node groups: a partition whose node groups are
    all of that type (the first in the config's order), else the feature named after it."""
    out: dict[str, Lever] = {}
    for p in partitions:
        groups = [g for g in node_groups if p in g.partitions]
        types = {g.gpu_type for g in groups}
        if len(types) == 1:
            t = types.pop()
            out.setdefault(t, Lever(partition=p))
    for g in node_groups:
        out.setdefault(g.gpu_type, Lever(feature=g.gpu_type))
    return out


class _Room:
    """Free GPUs per node of each type, taken as jobs are placed."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.free: dict[str, list[int]] = {}
        self.size: dict[str, int] = {}
        for n in nodes:
            if n.gpu_type and n.available:
                self.free.setdefault(n.gpu_type, []).append(n.gpus_free)
                self.size[n.gpu_type] = max(self.size.get(n.gpu_type, 0), n.gpus)

    def fits(self, gpu_type: str, gpus: int, take: bool = False) -> bool:
        free = self.free.get(gpu_type)
        size = self.size.get(gpu_type, 0)
        if not free or gpus <= 0 or size <= 0:
            return False
        if gpus <= size:  # one node: the fullest node that still fits (leave room whole)
            best = min((i for i, f in enumerate(free) if f >= gpus), key=lambda i: free[i], default=None)
            if best is None:
                return False
            if take:
                free[best] -= gpus
            return True
        whole = [i for i, f in enumerate(free) if f == size]
        need = -(-gpus // size)
        if len(whole) < need:
            return False
        if take:
            for i in whole[:need]:
                free[i] = 0
        return True


def choose_types(pending: Sequence[Job], nodes: Sequence[Node], model: ThroughputModel,
                 accepted: Mapping[int, tuple[str, ...]]) -> dict[int, TypeChoice]:
    """The type each waiting job in ``pending`` (the policy's order) should get, for the jobs
    with more than one accepted type (``accepted``: job id -> types); see the module text."""
    room = _Room(nodes)
    starters: list[tuple[Job, tuple[str, ...]]] = []
    out: dict[int, TypeChoice] = {}
    for job in pending:
        types = accepted.get(job.job_id) or ()
        if len(types) <= 1:
            if types and room.fits(types[0], job.num_gpus, take=True):
                pass  # starts on its one type: its GPUs are gone for the others
            continue
        ranked = model.best_types(job, types)
        first = next((t for t in ranked if room.fits(t, job.num_gpus)), None)
        if first is None:
            out[job.job_id] = TypeChoice(job.job_id, ranked[0], False,
                                         f"no room on {', '.join(types)} now: waits for {ranked[0]}, its fastest")
            continue
        room.fits(first, job.num_gpus, take=True)
        starters.append((job, tuple(ranked)))
    if not starters:
        return out
    room = _Room(nodes)  # the tentative pass said who starts; now where, by gain
    for job in pending:  # single-type jobs keep what they took
        types = accepted.get(job.job_id) or ()
        if len(types) == 1:
            room.fits(types[0], job.num_gpus, take=True)
    by_gain = sorted(starters, key=lambda s: (-_gain(model, s[0], s[1]), pending.index(s[0])))
    for job, ranked in by_gain:
        chosen = next((t for t in ranked if room.fits(t, job.num_gpus, take=True)), None)
        if chosen is None:
            out[job.job_id] = TypeChoice(job.job_id, ranked[0], False, f"no room left now: waits for {ranked[0]}")
            continue
        speeds = model.speeds(job)
        why = (f"{chosen} ({speeds[chosen].value:g}x, {speeds[chosen].source})"
               + (f"; {ranked[0]} went to jobs that gain more from it" if chosen != ranked[0] else
                  ", its fastest type with room"))
        out[job.job_id] = TypeChoice(job.job_id, chosen, True, why)
    return out


def _gain(model: ThroughputModel, job: Job, ranked: tuple[str, ...]) -> float:
    """How much more the job does on its fastest accepted type than on its slowest."""
    speeds = model.speeds(job)
    fast, slow = speeds[ranked[0]].value, speeds[ranked[-1]].value
    return fast / slow if slow > 0 else 1.0


@dataclass(frozen=True, slots=True)
class Move:
    """Move running job ``job_id`` from ``from_type`` to the faster ``to_type`` (checkpoint,
    requeue, steered there)."""

    job_id: int
    from_type: str
    to_type: str
    why: str


def plan_moves(running: Sequence[Job], waiting: Sequence[Job], nodes: Sequence[Node], model: ThroughputModel,
               *, min_speedup: float, can_move) -> list[Move]:
    """Running jobs to move to a faster type that has room nobody waiting could use.

    A job moves only to a type it accepts, at least ``min_speedup`` times faster for it than
    the type it runs on (so never back to a slower one), and only if ``can_move(job)`` (it
    opted in to preemption, ran long enough, was never moved before: the caller's rules).
    Room a waiting job may take is left to it: a type counts only when no waiting job accepts
    it. The jobs that gain most move first."""
    types = model.types
    wanted = {t for j in waiting for t in (j.accepted_types or types)}
    room = _Room(nodes)
    out: list[Move] = []
    cands = []
    for job in running:
        here = job.gpu_type
        if not here or len(job.accepted_types) < 2 or here not in job.accepted_types:
            continue
        speeds = model.speeds(job)
        for t in model.best_types(job, job.accepted_types):
            if t == here or t in wanted:
                continue
            gain = speeds[t].value / speeds[here].value if speeds[here].value > 0 else 1.0
            if gain >= min_speedup:
                cands.append((gain, job, t))
            break  # only its fastest free-of-demand type is worth a restart
    for gain, job, t in sorted(cands, key=lambda c: (-c[0], c[1].job_id)):
        if any(m.job_id == job.job_id for m in out) or not can_move(job):
            continue
        if room.fits(t, job.num_gpus, take=True):
            out.append(Move(job.job_id, job.gpu_type, t,
                            f"{t} frees with nobody waiting for it; it runs {gain:.2g}x faster there than on "
                            f"{job.gpu_type} (moves at {min_speedup:g}x or more)"))
    return out
