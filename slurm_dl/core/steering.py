"""Which GPU type each waiting job should get, and the Slurm lever that steers it there. Pure.

The site's policy decides *who* goes first (the order of the waiting jobs); heterogeneity
decides *where*, by the rule the simulator's ``--type-choice aware`` measures (Gavel's idea of
comparative advantage, OSDI 2020):

* a job's **rates**: its speed on each type it accepts over its speed on its fastest
  (:func:`job_rates`, from the throughput model);
* its **order** of types: by its rate there over the mean rate there of the jobs about
  (:func:`comparative_order`): a type goes to the jobs that gain most from it relative to the
  others, not merely to the first job that could use it;
* **crowded** (the waiting jobs ask more GPUs than are free): in the policy's order each job
  takes the first type in its order with room, and waits rather than run below ``DECLINE``
  (half) of its best speed where the other jobs gain more from that type (:func:`declines`),
  leaving those GPUs to jobs ranked below it; **not crowded**: each
  takes its fastest type with room (holding a fast type back for jobs that are not there only
  slows it down).

A job that names one type, or accepts one, is never steered; one that cannot start now is
steered to its fastest type (the next decision moves it as room comes and goes).

A deadline job (one admission promised: a hard deadline, or the soft step it promised) goes
only where it still makes its deadline at its speed there (:func:`deadline_types`): its
remaining time limit is what it needs on its fastest type, so on a type at a third of that
speed it needs three times as long, ``now + remaining × best speed / speed there``. Slurm does
not scale the limit: the job gets the same wall time on any type. Where no type it accepts
can still make it, it keeps to its fastest.

The lever: a partition that holds only nodes of the type (e.g. ``h100``), else the node
feature named after the type (``--constraint``-style ``Features=h100``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from .model import Job, Node
from .policy.deadline import DEMOTED_TAG, SOFT_FROM_TAG, remaining_run
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
        self.gpus: dict[str, list[int]] = {}
        self.size: dict[str, int] = {}
        for n in nodes:
            if n.gpu_type and n.available:
                self.free.setdefault(n.gpu_type, []).append(n.gpus_free)
                self.gpus.setdefault(n.gpu_type, []).append(n.gpus)
                self.size[n.gpu_type] = max(self.size.get(n.gpu_type, 0), n.gpus)

    def fits(self, gpu_type: str, gpus: int, take: bool = False, in_use_only: bool = False) -> bool:
        """Whether ``gpus`` fit on one type's free GPUs (``take``: and take them);
        ``in_use_only``: on a node already in use, never a whole free one."""
        free = self.free.get(gpu_type)
        size = self.size.get(gpu_type, 0)
        if not free or gpus <= 0 or size <= 0:
            return False
        if gpus <= size:  # one node: the fullest node that still fits (leave room whole)
            best = min(
                (i for i, f in enumerate(free) if f >= gpus), key=lambda i: free[i], default=None
            )
            if best is None or (in_use_only and free[best] == self.gpus[gpu_type][best]):
                return False
            if take:
                free[best] -= gpus
            return True
        if in_use_only:
            return False
        whole = [i for i, f in enumerate(free) if f == size]
        need = -(-gpus // size)
        if len(whole) < need:
            return False
        if take:
            for i in whole[:need]:
                free[i] = 0
        return True


DECLINE = 0.5
"""Crowded, a job waits rather than run below this share of its best speed (see ``declines``)."""


def declines(rate: float, mean: float) -> bool:
    """Crowded, does a job wait rather than take a type where it runs at ``rate`` of its best
    speed, the jobs about running there at ``mean`` on average? Only below ``DECLINE`` and
    where the others gain more from the type than it does (its comparative advantage there is
    under 1): when every job is as slow there, nobody who waits leaves it to a job that uses
    it better, and the type would stand idle."""
    return rate < DECLINE and rate < mean


def job_rates(model: ThroughputModel, job: Job, types: Sequence[str]) -> dict[str, float]:
    """``job``'s speed on each of ``types`` over its speed on the fastest of them (≤ 1)."""
    sp = model.speeds(job)
    top = max(sp[t].value for t in types)
    return {t: sp[t].value / top for t in types}


def promised_deadline(job: Job) -> float | None:
    """The deadline admission promised the job: its hard deadline, or the soft step it
    promised; None without one, or when it was not admitted (it runs as best effort)."""
    tags = job.tags or {}
    if tags.get(DEMOTED_TAG):
        return None
    if job.deadline is not None:
        return job.deadline
    try:
        return float(tags[SOFT_FROM_TAG]) if job.soft_deadlines else None
    except (KeyError, TypeError, ValueError):
        return None


def deadline_types(
    job: Job, rates: Mapping[str, float], now: float
) -> tuple[list[str], dict[str, float]]:
    """The types in ``rates`` (the job's rate on each, 1 on its fastest) where ``job`` still
    makes its promised deadline when its remaining time limit runs at its speed there, and
    each type's finish time at that speed; all of them for a job without a promised deadline
    or a time limit; its fastest alone where none can make it."""
    deadline = promised_deadline(job)
    need = remaining_run(job, now)
    if deadline is None or need is None or not rates:
        return list(rates), {}
    ends = {t: now + need / r if r > 0 else float("inf") for t, r in rates.items()}
    meets = [t for t in rates if ends[t] <= deadline]
    return (meets or [max(rates, key=lambda t: rates[t])]), ends


def _span(seconds: float) -> str:
    m = max(1, round(seconds / 60.0))
    return f"{m} min" if m < 120 else f"{m / 60:.1f} h"


def unscaled_limit_words(time_limit_s: float | None, speeds: Mapping[str, float]) -> str | None:
    """What a deadline job that may run on GPU types of different speeds (``speeds``: its
    speed on each type it accepts) is told: its time limit is wall time on whichever type it
    gets, not scaled by speed; None when its types are all as fast (or no limit)."""
    if time_limit_s is None or len(speeds) < 2:
        return None
    best = max(speeds.values())
    top = min((t for t, v in speeds.items() if v == best))
    slow = [(t, time_limit_s * best / v) for t, v in speeds.items() if 0 < v < best]
    if not slow:
        return None
    needs = ", ".join(f"{_span(s)} on {t}" for t, s in slow)
    return (
        f"the time limit ({_span(time_limit_s)}) is wall time on whichever GPU type the job "
        f"gets, not scaled by its speed: if that is what its work takes on {top}, it takes "
        f"{needs}. The job is kept to the types where it makes its deadline at its speed; "
        f"to be sure, name the type (--gres=gpu:{top}:N, dlsubmit --gpu-type {top})"
    )


def mean_rates(rates: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The mean rate on each type over the jobs that accept it."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for r in rates:
        for t, v in r.items():
            sums[t] = sums.get(t, 0.0) + v
            counts[t] = counts.get(t, 0) + 1
    return {t: (sums[t] / counts[t]) or 1.0 for t in sums}


def comparative_order(
    rates: Mapping[str, float], means: Mapping[str, float], type_order: Sequence[str]
) -> list[str]:
    """A job's types by its comparative advantage: its rate there over the mean rate there
    (ties: faster for the job, then the site's type order)."""
    index = {t: i for i, t in enumerate(type_order)}
    return sorted(
        rates, key=lambda t: (-rates[t] / means.get(t, 1.0), -rates[t], index.get(t, len(index)))
    )


def choose_types(
    pending: Sequence[Job],
    nodes: Sequence[Node],
    model: ThroughputModel,
    accepted: Mapping[int, tuple[str, ...]],
    others: Sequence[Job] = (),
    now: float | None = None,
) -> dict[int, TypeChoice]:
    """The type each waiting job in ``pending`` (the policy's order) should get, for the jobs
    with more than one accepted type (``accepted``: job id -> types); ``others``: the running
    jobs, whose rates count in the means; ``now``: to keep deadline jobs to the types where
    they still make their deadline (None: no deadline is checked). See the module text."""
    room = _Room(nodes)
    flexible = [j for j in pending if len(accepted.get(j.job_id) or ()) > 1]
    if not flexible:
        return {}
    rates = {j.job_id: job_rates(model, j, accepted[j.job_id]) for j in flexible}
    about = [rates[j.job_id] for j in flexible]
    about += [job_rates(model, j, j.accepted_types) for j in others if len(j.accepted_types) > 1]
    means = mean_rates(about)
    free = sum(f for fs in room.free.values() for f in fs)
    crowded = sum(j.num_gpus for j in pending) > free
    out: dict[int, TypeChoice] = {}
    for job in pending:
        types = accepted.get(job.job_id) or ()
        if len(types) <= 1:
            if types:
                room.fits(types[0], job.num_gpus, take=True)  # starts on its one type: room gone
            continue
        r = rates[job.job_id]
        fastest = sorted(
            types, key=lambda t: (-r[t], model.types.index(t) if t in model.types else 0)
        )
        order = comparative_order(r, means, model.types) if crowded else fastest
        late = ""
        if now is not None:
            ok, ends = deadline_types(job, r, now)
            if len(ok) < len(types):
                slow = [t for t in fastest if t not in ok]
                late = f"; {', '.join(slow)} would finish after its deadline at its speed there"
                if not any(ends[t] <= (promised_deadline(job) or 0.0) for t in ok):
                    late = "; no type it accepts makes its deadline now: its fastest"
                order = [t for t in order if t in ok]
        chosen = None
        for t in order:
            if room.fits(t, job.num_gpus):
                if crowded and declines(r[t], means.get(t, 1.0)):
                    break
                chosen = t
                break
        if chosen is None:
            out[job.job_id] = TypeChoice(
                job.job_id,
                fastest[0],
                False,
                f"no room it should take now: waits for {fastest[0]}, its fastest{late}",
            )
            continue
        room.fits(chosen, job.num_gpus, take=True)
        sp = model.speeds(job)[chosen]
        if chosen == fastest[0]:
            why = f"{chosen} ({sp.value:g}x, {sp.source}): its fastest type with room"
        else:
            why = (
                f"{chosen} ({sp.value:g}x, {sp.source}): {fastest[0]} is full or goes to jobs that gain more "
                "from it"
            )
        out[job.job_id] = TypeChoice(job.job_id, chosen, True, why + late)
    return out


@dataclass(frozen=True, slots=True)
class Move:
    """Move running job ``job_id`` from ``from_type`` to the faster ``to_type`` (checkpoint,
    requeue, steered there)."""

    job_id: int
    from_type: str
    to_type: str
    why: str


def plan_moves(
    running: Sequence[Job],
    waiting: Sequence[Job],
    nodes: Sequence[Node],
    model: ThroughputModel,
    *,
    min_speedup: float,
    can_move,
    behind: Collection[str] = (),
    restart_s: float = 0.0,
) -> list[Move]:
    """Running jobs to move to a faster type that has room nobody waiting could use.

    A job moves only to a type it accepts, at least ``min_speedup`` times faster for it than
    the type it runs on (so never back to a slower one), and only if ``can_move(job)`` (it
    opted in to preemption, ran long enough, has moves left: the caller's rules).
    Room a waiting job may take is left to it: a type counts only when no waiting job accepts
    it. The exception is fair share: a job of an account in ``behind`` (below its fair share,
    or asking no more than it: :func:`slurm_dl.core.fairness.entitled`) would be ahead of the
    waiting jobs of the other accounts for that room, so it may take room they want, on a node already in use (a whole free node is left to wide
    waiting jobs), and such jobs move first, if the time they would save, reckoned on the work
    done so far (the run time left is not known), is more than ``restart_s``:
    ``executed_s × (1 − 1/gain) > restart_s``. Then the jobs that gain most. The simulator's
    fair share moves jobs by the same rule."""
    types = model.types
    wanted = {t for j in waiting for t in (j.accepted_types or types)}
    room = _Room(nodes)
    out: list[Move] = []
    cands = []
    for job in running:
        here = job.gpu_type
        if not here or len(job.accepted_types) < 2 or here not in job.accepted_types:
            continue
        first = job.account in behind
        speeds = model.speeds(job)
        for t in model.best_types(job, job.accepted_types):
            if t == here:
                break  # it runs on its fastest type with room for it
            if t in wanted and not first:
                continue
            gain = speeds[t].value / speeds[here].value if speeds[here].value > 0 else 1.0
            if gain >= min_speedup and (
                not first or job.executed_s * (1.0 - 1.0 / gain) > restart_s
            ):
                cands.append((not first, gain, job, t))
            if not first:
                break  # only its fastest free-of-demand type is worth a restart
    for later, gain, job, t in sorted(cands, key=lambda c: (c[0], -c[1], c[2].job_id)):
        if any(m.job_id == job.job_id for m in out) or not can_move(job):
            continue
        if room.fits(t, job.num_gpus, take=True, in_use_only=not later and t in wanted):
            why = (
                f"its account is within its fair share and {t} has room"
                if not later
                else f"{t} frees with nobody waiting for it"
            )
            out.append(
                Move(
                    job.job_id,
                    job.gpu_type,
                    t,
                    f"{why}; it runs {gain:.2g}x faster there than on "
                    f"{job.gpu_type} (moves at {min_speedup:g}x or more)",
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class ShardChoice:
    """The node a waiting shard job should start on, and why."""

    job_id: int
    node: str
    joins_shared: bool  # onto a GPU already shared, not a newly opened one
    why: str


def choose_shard_nodes(
    pending: Sequence[Job],
    nodes: Sequence[Node],
    shards_per_gpu: Mapping[str, int],
    used: Mapping[str, Mapping[int, int]],
) -> dict[int, ShardChoice]:
    """Where each waiting shard job in ``pending`` (the policy's order) should start, packing
    shards onto GPUs already shared before opening another, so whole GPUs stay free for the jobs
    that need them (fragmentation-aware placement in the spirit of FGD, as the simulator's
    ``bestfit``/``fgd``).

    ``shards_per_gpu``: the shard nodes and how many shards each GPU offers; ``used``: node ->
    GPU index -> shards held by running jobs. A GPU with shards in use still counts as free in
    Slurm's GPU count (``Node.gpus_free``), so a node's whole free GPUs are its free GPUs less
    those with shards in use.

    A job joins the shared GPU its shards fill best (fewest shards left after it; ties: the node
    with fewer whole free GPUs, then the name). Where no shared GPU has room it opens a GPU on the
    shard node with the fewest whole free GPUs (>= 1), leaving the nodes with the most whole GPUs
    to jobs of several GPUs. A job no node has room for gets no choice (Slurm keeps it waiting)."""
    state: dict[str, dict[int, int]] = {}
    whole: dict[str, int] = {}
    for n in nodes:
        spg = shards_per_gpu.get(n.name, 0)
        if spg <= 0 or not n.available:
            continue
        gpus = {g: u for g, u in (used.get(n.name) or {}).items() if u > 0}
        state[n.name] = dict(gpus)
        whole[n.name] = max(0, n.gpus_free - len(gpus))
    out: dict[int, ShardChoice] = {}
    opened = 0
    for job in pending:
        k = job.shards
        if k <= 0:
            continue
        shared = [
            (shards_per_gpu[name] - u - k, whole[name], name, g, u)
            for name, gpus in state.items()
            for g, u in gpus.items()
            if u < shards_per_gpu[name] and shards_per_gpu[name] - u >= k
        ]
        if shared:
            left, _, name, g, u = min(shared)
            state[name][g] = u + k
            gpu = f"GPU {g} of {name}" if g >= 0 else f"a GPU of {name} opened this cycle"
            out[job.job_id] = ShardChoice(
                job.job_id,
                name,
                True,
                f"joins {gpu}, already shared ({u} of {shards_per_gpu[name]} shards "
                "in use): whole GPUs stay free",
            )
            continue
        fresh = [
            (whole[name], name) for name in state if whole[name] > 0 and shards_per_gpu[name] >= k
        ]
        if not fresh:
            continue
        free, name = min(fresh)
        opened += 1
        state[name][-opened] = k  # a GPU Slurm will pick on that node: its index is not known yet
        whole[name] -= 1
        out[job.job_id] = ShardChoice(
            job.job_id,
            name,
            False,
            f"no shared GPU has {k} shard(s) free: opens a GPU on {name}, the shard "
            f"node with the fewest whole GPUs free ({free}), so others stay whole",
        )
    return out
