"""GPUs of several types: node groups, each of one type and node size, and which type each job
gets (``simulate --type-choice``).

A job's GPUs are all of one group (one type; Slurm could mix types across the nodes of an
untyped multi-node job, which would then run at its slowest type's pace). Inside a group the
consolidated rule of :mod:`.placement` applies. The groups a job may use are those of the
types it accepts (``Job.accepted_types``; else its ``gpu_type``; else any).

Speeds come from the throughput model (slurm_dl.core.throughput): the trace's duration is the
job's run time on its fastest type among the cluster's types it accepts, so on type t it runs
``duration × speed_fastest / speed_t``. A history job with a recorded type the cluster has is
replayed on that type, at its recorded run time. While it runs a job is charged service at
its type's site speed (``type_speed``): LAS, fair share and deadlines see service normalised
by type speed.

Choices:

* ``blind``   — what Slurm does with ``--gpus=N``: the first group in node order where the job
  fits (best fit inside it);
* ``fastest`` — the free type fastest for this job first;
* ``constrained`` — what a careful user asks of Slurm: each job limited to the types that run it
  at least :data:`CONSTRAINED_SPEED` of its best speed (``--gres=gpu:TYPE`` or a
  ``--constraint`` of those types), then Slurm's first free GPUs among them in node order;
* ``aware``   — heterogeneity-aware (in the spirit of Gavel, OSDI 2020): each job goes where its
  speed relative to the other jobs' is highest (:class:`AwareChoice`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ...core.steering import comparative_order, declines
from ...core.throughput import ThroughputModel
from .fleet import NodeGroupSpec
from .placement import Allocation, place_consolidated
from .typed_jobs import CONSTRAINED_SPEED, job_rates  # noqa: F401 - (documented here)

CHOICES = ("blind", "fastest", "constrained", "aware")


@dataclass(frozen=True)
class TypeSetup:
    """How a replay on several GPU types chooses them: ``choice`` (one of ``CHOICES``), the
    throughput model (None: every type as fast), and whether jobs keep the type recorded in
    their history (``recorded``).

    ``prior``: with the aware choice, the speeds it chooses by are learnt as the replay's runs
    finish, starting from this model (:mod:`.typed_learn`); None: it reads ``model``, the
    speeds the run times come from (an oracle)."""

    choice: str = "aware"
    model: ThroughputModel | None = None
    recorded: bool = False
    prior: ThroughputModel | None = None


class TypedPlacer:
    """Free GPUs per node of each group, and the type choice (see the module docstring)."""

    flat = False
    varied = True
    spread = False
    by_width = False  # (until prepare: whether every job may use every group)

    def __init__(
        self,
        groups: Sequence[NodeGroupSpec],
        choice: str,
        model: ThroughputModel | None = None,
        recorded: bool = False,
    ) -> None:
        if choice not in CHOICES:
            raise ValueError(f"type choice {choice!r}; allowed: {', '.join(CHOICES)}")
        self.groups = list(groups)
        self.choice = choice
        self.model = model
        self.recorded = recorded  # a history: jobs keep the type they ran on
        self.types = list(dict.fromkeys(g.gpu_type for g in groups))
        self.gfree = [[g.gpus_per_node] * g.nodes for g in groups]
        self.free = [
            g.gpus_per_node for g in groups for _ in range(g.nodes)
        ]  # all nodes (kept too)
        self.per = [g.gpus_per_node for g in groups]
        self.gft = [g.gpus for g in groups]
        offsets, k = [], 0
        for g in groups:
            offsets.append(k)
            k += g.nodes
        self.offset = offsets
        self.node_group = [i for i, g in enumerate(groups) for _ in range(g.nodes)]
        self.total = self.free_total = sum(self.gft)
        self.per_node = max(self.per)
        self.free_ver = 0
        self.gver = [0] * len(groups)
        self._unplaceable: list[dict[int, int]] = [{} for _ in groups]
        speed = (
            (lambda t: model.type_speed(t))
            if model is not None and all(t in model.types for t in self.types)
            else (lambda t: 1.0)
        )
        self.charges = [speed(g.gpu_type) for g in groups]
        self.mean_charge = sum(c * g.gpus for c, g in zip(self.charges, groups)) / self.total
        self.busy_s = [0.0] * len(groups)  # GPU-seconds run on each group
        # aware: do the waiting jobs ask more GPUs than are free (the engine says before each
        # pass)? If not, every one of them can start now and a job takes its fastest free type:
        # holding a fast type back for jobs that are not there only slows it down
        self.crowded = True
        self._order: dict[int, tuple[int, ...]] = {}  # seq -> groups to try, in order

    # --- the jobs -----------------------------------------------------------------------------
    def prepare(self, sims: list, ranker) -> None:
        """Each job's speed on every group, the groups it may use in the order it tries them,
        and its work at full speed; refuses jobs that fit no group they accept."""

        bad: list = []
        every = True
        for sj in sims:
            rates, allowed, scale = job_rates(sj.job, self, bad)
            sj.rates = rates
            if scale != 1.0:
                sj.remaining *= scale
            self._order[sj.seq] = self.order_for(allowed, rates)
            every = every and len(allowed) == len(self.groups)
        if bad:
            raise ValueError(
                bad[0] if len(bad) == 1 else f"{len(bad)} jobs cannot run here; first: {bad[0]}"
            )
        self._fastest = self._order
        self._means = dict.fromkeys(range(len(self.groups)), 1.0)
        if self.choice == "aware":
            self._fastest = {
                sj.seq: tuple(sorted(o, key=lambda g: (-sj.rates[g], g)))
                for sj, o in zip(sims, (self._order[s.seq] for s in sims))
            }
            self._order, self._means = aware_orders(self, sims)
        # the lease book's fill takes a width that failed to place as failing for every job of
        # that width: true when every job may use every group (it tries them all) and the
        # nodes are all of one size (the book's own check of what may place counts nodes so)
        self.by_width = every and len(set(self.per)) == 1

    def allowed(self, sj) -> tuple[int, ...]:
        """The groups ``sj`` may use."""
        return self._order[sj.seq]

    def seen(self, sj) -> tuple[float, ...]:
        """``sj``'s speed on each group as the choice knows it (here: its true speed)."""
        return sj.rates

    def order_for(self, allowed: list[int], rates: tuple[float, ...]) -> tuple[int, ...]:
        if self.choice == "fastest":
            return tuple(sorted(allowed, key=lambda g: (-rates[g], g)))
        return tuple(allowed)

    @property
    def group_sizes(self) -> list[int]:
        return [g.gpus for g in self.groups]

    # --- placing ------------------------------------------------------------------------------
    def place(self, sj, forced: bool = False) -> Allocation | None:
        """Where ``sj`` goes on the free GPUs now: the first group in its order where it fits
        (aware: its comparative-advantage order; its fastest free type first when the waiting
        jobs ask no more GPUs than are free). Used by every pass but the aware preemptive
        selection (:meth:`choose`); it never declines (``forced``: for the lease moves)."""
        gpus = sj.gpus
        if gpus > self.free_total:
            return None
        crowded = self.crowded
        for g in self._order[sj.seq] if crowded else self._fastest[sj.seq]:
            alloc = self.place_in(g, gpus)
            if alloc is not None:
                return alloc
        return None

    def choose(self, sj, cap: list[int], free: list[int], strict: bool) -> int | None:
        """The group ``sj`` should take (the aware selection): ``cap`` GPUs per group not taken
        by jobs ranked above it, ``free`` of them free now (not run by jobs ranked below). In its
        order (comparative advantage; when the waiting jobs all fit in the free GPUs, its
        fastest first) it takes a group with free room, else one where it displaces jobs ranked
        below it; None: no group has room, or (``strict``, the waiting jobs asking more than
        is free) it would run at under half its best speed where the others gain more from
        that type (:func:`~slurm_dl.core.steering.declines`): it waits for a faster type,
        leaving the GPUs to jobs ranked below it."""
        gpus = sj.gpus
        crowded = self.crowded
        order = self._order[sj.seq] if crowded else self._fastest[sj.seq]
        for room in (free, cap):
            for g in order:
                if room[g] >= gpus and cap[g] >= gpus:
                    if strict and crowded and declines(sj.rates[g], self._means[g]):
                        break
                    return g
        return None

    def place_in(self, g: int, gpus: int) -> Allocation | None:
        """``gpus`` GPUs on group ``g`` by the consolidated rule (global node indexes), or None."""
        if self.gft[g] < gpus or self._unplaceable[g].get(gpus) == self.gver[g]:
            return None
        alloc = place_consolidated(self.gfree[g], gpus, self.per[g])
        if alloc is None:
            self._unplaceable[g][gpus] = self.gver[g]
            return None
        off = self.offset[g]
        return tuple((off + i, n) for i, n in alloc) if off else alloc

    def take(self, alloc: Allocation, sj) -> None:
        g = self.node_group[alloc[0][0]]
        free, off, flat = self.gfree[g], self.offset[g], self.free
        for i, n in alloc:
            free[i - off] -= n
            flat[i] -= n
        self.gft[g] -= sj.gpus
        self.gver[g] += 1
        self.free_total -= sj.gpus
        self.free_ver += 1
        sj.charge = self.charges[g]
        sj.width = sj.gpus * sj.charge

    def give(self, alloc: Allocation) -> None:
        if not alloc:
            return
        g = self.node_group[alloc[0][0]]
        free, off, flat = self.gfree[g], self.offset[g], self.free
        n = 0
        for i, k in alloc:
            free[i - off] += k
            flat[i] += k
            n += k
        self.gft[g] += n
        self.gver[g] += 1
        self.free_total += n
        self.free_ver += 1

    def speed(self, sj, alloc: Allocation) -> float:
        return sj.rates[self.node_group[alloc[0][0]]]

    def ran(self, sj, seconds: float) -> None:
        """``sj`` ran ``seconds`` on its allocation (per-type utilisation)."""
        self.busy_s[self.node_group[sj.alloc[0][0]]] += sj.gpus * seconds

    def group_of(self, alloc: Allocation) -> int:
        return self.node_group[alloc[0][0]]

    # --- views ------------------------------------------------------------------------------
    def node_view(self) -> dict:
        """The free GPUs and size of every node, for the lease decision."""
        return {
            "node_free": list(self.free),
            "per_node": self.per_node,
            "node_sizes": [p for g, p in zip(self.groups, self.per) for _ in range(g.nodes)],
        }

    def type_busy(self) -> dict[str, tuple[int, float]]:
        """Per type: (GPUs, GPU-seconds run), for the per-type utilisation."""
        out: dict[str, list] = {}
        for g, busy in zip(self.groups, self.busy_s):
            row = out.setdefault(g.gpu_type, [0, 0.0])
            row[0] += g.gpus
            row[1] += busy
        return {t: (n, b) for t, (n, b) in out.items()}


def aware_orders(
    placer: TypedPlacer, sims: list
) -> tuple[dict[int, tuple[int, ...]], dict[int, float]]:
    """Each job's groups by its comparative advantage (the prioritizer's rule,
    :func:`slurm_dl.core.steering.comparative_order`): its speed on the group's type over the
    mean speed there of the jobs in the replay, so the types go to the jobs that gain most
    from them relative to the others (ties: faster for the job, then node order); and those
    means per group."""
    n = len(placer.groups)
    sums = [0.0] * n
    for sj in sims:
        for g in range(n):
            sums[g] += sj.rates[g]
    mean = {g: s / max(1, len(sims)) or 1.0 for g, s in enumerate(sums)}
    groups = range(n)
    orders = {
        sj.seq: tuple(
            comparative_order({g: sj.rates[g] for g in placer._order[sj.seq]}, mean, groups)
        )
        for sj in sims
    }
    return orders, mean
