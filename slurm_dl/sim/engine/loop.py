"""The event-driven engine for one cluster (pure: jobs in, finished job states out).

At each event time: completions first, then arrivals, then one scheduling pass. Events are job
completions, arrivals and key-change wake-ups a ranker asks for (e.g. LAS threshold crossings).

Disciplines:
* ``strict``     — pending jobs in key order; the pass stops at the first that does not fit.
* ``firstfit``   — pending jobs in key order; a job that does not fit is skipped.
* ``backfill``   — EASY backfill (Slurm-like): the first job that does not fit reserves the
                   earliest time enough GPUs free up (from running jobs' time limits — the trace's
                   limit when it has one, else the true duration, i.e. perfect user estimates);
                   later jobs start now only if they fit and end before that time or use only
                   GPUs the reservation does not need.
* ``lease``      — fair share with GPU leases: free GPUs go to waiting jobs in the policy's order
                   (accounts below their fair share first), then the shared decision of
                   :mod:`slurm_dl.core.fairness` moves GPUs from over-share accounts' jobs whose
                   lease is over; a wake-up is scheduled when the first blocking lease ends.
* ``preemptive`` — pending and running jobs ranked together, selected greedily while their GPUs
                   fit in the cluster total (skip what does not fit), running jobs not selected
                   are preempted (their remaining work grows by the preemption cost), selected
                   pending jobs are placed in rank order (a placement failure leaves one waiting).

Several GPU types (a :class:`ClusterSpec` with node groups): where GPUs are and how fast each
job runs there is :class:`~slurm_dl.sim.engine.typed.TypedPlacer`'s; with the ``aware`` type choice
the preemptive discipline selects per type (:mod:`.preempt_typed`). One type and node size
keeps :class:`~slurm_dl.sim.engine.placement.FlatPlacer` and the passes above, unchanged.

Dispatch overheads (:class:`~slurm_dl.sim.engine.state.Dispatch`, off by default): a finished job's
GPUs come back ``release_s`` after its end (Slurm: the job completing, its epilog, the node
reporting back), and scheduling passes run only every ``pass_s`` seconds (Slurm's
``sched_interval`` / ``bf_interval``) instead of at every event.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Callable, Protocol

from .fit import FitPasses
from .grouped import GroupedPasses
from .preempt import PreemptivePasses
from .preempt_typed import TypedPasses
from .cluster_state import _DONE, _TICK, _WAKE, EngineState, index_of
from .fleet import NodeGroupSpec
from .placement import FlatPlacer, min_nodes
from .power import PowerSave, powered
from .state import Dispatch, PreemptionCost, SimJob
from .typed import TypedPlacer, TypeSetup

INF = float("inf")


class Ranker(Protocol):
    """The engine's view of what orders its jobs (the policy's keys, wake-ups, discipline and
    charging): :class:`~slurm_dl.sim.ranking.ranker.PolicyRanker`, which sits above the engine
    (the engine never imports the ranking; it only calls what the ranker offers)."""

    discipline: str


@dataclass
class ClusterSpec:
    """``nodes`` × ``gpus_per_node`` GPUs of one type; or, with ``groups``, node groups of
    several types or sizes (``nodes`` and ``gpus_per_node`` then: all nodes, the largest)."""

    name: str
    nodes: int
    gpus_per_node: int = 8
    groups: tuple[NodeGroupSpec, ...] = ()

    @classmethod
    def of_groups(cls, name: str, groups) -> "ClusterSpec":
        groups = tuple(groups)
        return cls(name, sum(g.nodes for g in groups), max(g.gpus_per_node for g in groups), groups)

    @property
    def total_gpus(self) -> int:
        if self.groups:
            return sum(g.gpus for g in self.groups)
        return self.nodes * self.gpus_per_node

    @property
    def typed(self) -> bool:
        """Node groups: the typed placer (:mod:`.typed`). (A cluster of one type and node
        size is given as ``nodes`` × ``gpus_per_node``: see :func:`.fleet.several_types`.)"""
        return bool(self.groups)


@dataclass
class ClusterResult:
    cluster: ClusterSpec
    jobs: list[SimJob]
    queue_deltas: list[tuple[float, int]] = field(default_factory=list)  # (time, Δ pending jobs)
    preemptions: int = 0
    type_busy: dict[str, tuple[int, float]] | None = None  # per GPU type: (GPUs, GPU-seconds run)
    moves: int = 0  # of the preemptions, moves to a faster type (fair share on several types)
    power: dict | None = None  # with --power-save: the nodes' energy and power cycles

    def packed(self) -> tuple:
        """This result as plain tuples, for another process: each job's figures (not the
        engine's own working state, nor its model Job: the receiver has the trace, and
        :meth:`unpacked` puts the trace's Job back), several times quicker to pickle."""
        rows = [tuple(map(getattr, [sj] * len(_SENT), _SENT)) for sj in self.jobs]
        return (
            self.cluster,
            rows,
            self.queue_deltas,
            self.preemptions,
            self.type_busy,
            self.moves,
            self.power,
        )

    @staticmethod
    def unpacked(packed: tuple, jobs: list) -> "ClusterResult":
        """The result :meth:`packed` sent, the replayed ``jobs`` (the cluster's, in order) back in."""
        cluster, rows, qd, preemptions, type_busy, moves, power = packed
        sims = []
        new, put = SimJob.__new__, setattr
        for row in rows:
            sj = new(SimJob)
            for s, v in zip(_SENT, row):
                put(sj, s, v)
            sj.job = jobs[sj.seq]
            sims.append(sj)
        return ClusterResult(cluster, sims, qd, preemptions, type_busy, moves, power)


# what a job's figures are made of once its replay is over (the rest is the engine's)
_SENT = tuple(
    s
    for s in SimJob.__slots__
    if s not in ("job", "alloc", "rates", "pend_key", "static_key", "version")
)


class Engine(FitPasses, PreemptivePasses, GroupedPasses, TypedPasses, EngineState):
    """One replay: the event loop over an :class:`EngineState` and the disciplines' passes."""

    def run(self) -> list[SimJob]:
        arrivals = self.arrivals
        n = len(arrivals)
        heap, releases = self.heap, self.releases
        origin = arrivals[0].submit if arrivals else 0.0
        ai = 0
        while ai < n or heap or releases:
            # a superseded completion or wake-up (the job stopped or started since) is no
            # event: a pass at its time would re-rank on a clock nothing happened at, and with
            # keys that drift in time (fair share) each such pass can preempt, leaving more
            # stale entries
            while heap and heap[0][3] != heap[0][4].version:
                heapq.heappop(heap)
            if ai >= n and not heap and not releases:
                break
            t_arr = arrivals[ai].submit if ai < n else INF
            now = min(t_arr, heap[0][0] if heap else INF, releases[0][0] if releases else INF)
            if self.power is not None:
                self.power.advance(now, self.waiting_gpus)
            self.release_until(now)
            same = self.fast and self.ranked_run and self.idle_ver == self.placer.free_ver
            done, same = self.events(now, same)
            if done:
                same = self.after_finishes(now, same)
            while ai < n and arrivals[ai].submit <= now:
                same = False
                sj = arrivals[ai]
                ai += 1
                if self.arrive is not None:
                    self.arrive(sj, now, self.total)
                if self.book is not None:
                    self.book.arrive(sj)
                if self.learns:
                    self.placer.arrived(sj, now)
                self.enqueue(sj, now)
            if self.needs_usage:
                self.refresh_usage(now)
            if self.pass_s and self.off_pass(now, origin):
                self.idle_ver = -1  # what happened now is passed over at the next pass time
                continue
            self.schedule(now, done, same)
        return self.sims

    def events(self, now: float, same: bool) -> tuple[bool, bool]:
        """Completions and wake-ups due at ``now``; (any job finished, ``same`` still holds)."""
        heap = self.heap
        done = False
        last = None
        ranked_run = self.ranked_run
        touched, woken = self.touched, self.woken
        wake = self.wake_ranked if ranked_run else self.wake_running
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            _, kind, _, ver, sj = entry
            if ver != sj.version or sj is _TICK:
                continue
            if entry == last and ranked_run:
                # the same wake-up twice (a re-key at a checkpoint pushes a job's next change
                # again, often at the very time already pushed): the second reads the same
                # key at the same time and pushes the same next one, so it changes nothing
                continue
            last = entry
            if kind == _DONE:
                self.finish(sj, now)
                done = True
            elif sj.running:
                if touched is not None:
                    # rekey_some may have left a second wake-up for the same time: one is enough
                    if woken.get(sj.seq) == (now, ver):
                        continue
                    woken[sj.seq] = (now, ver)
                same = wake(sj, now, same)
            else:  # a waiting job's key changes on its own (starvation guard, deadline boost)
                same = False
                self.wake_pending(sj, now)
        return done, same

    def wake_ranked(self, sj: SimJob, now: float, same: bool) -> bool:
        """A running job's key may change (ranked preemptive path): move it in ``rkeys``."""
        rkeys, rjobs, rgpus = self.rkeys, self.rjobs, self.rgpus
        old = sj.static_key
        i = index_of(rkeys, rjobs, old, sj)
        del rkeys[i]
        del rjobs[i]
        del rgpus[i]
        sj.static_key, nxt = k, nxt = self.ranker.key_and_next(sj, now)
        i = bisect_right(rkeys, k)
        rkeys.insert(i, k)
        rjobs.insert(i, sj)
        rgpus.insert(i, sj.gpus)
        if same:
            pk = self.pending_keys
            if bisect_right(pk, old) != bisect_right(pk, k):
                same = False
        if nxt is not None and nxt < sj.seg_start + sj.remaining / sj.speed:
            heapq.heappush(self.heap, (nxt, _WAKE, sj.seq, sj.version, sj))
        return same

    def wake_running(self, sj: SimJob, now: float, same: bool) -> bool:
        ranker = self.ranker
        if self.cached_running:
            sj.static_key, nxt = ranker.key_and_next(sj, now)
        else:
            if self.grouped_run:
                self.g_remove(self.gr, sj, sj.static_key)
                self.g_insert(self.gr, sj, ranker.group_key(sj, now), True)
            nxt = ranker.next_change(sj, now)
        self.push_wake(sj, nxt)
        return same

    def wake_pending(self, sj: SimJob, now: float) -> None:
        if self.piecewise:
            self.rekey_pending(sj, now)
        elif self.grouped:
            self.g_remove(self.gp, sj, sj.pend_key)
            self.g_insert(self.gp, sj, self.ranker.group_key(sj, now), False)
        nxt = self.ranker.next_change(sj, now)
        if nxt is not None:
            heapq.heappush(self.heap, (nxt, _WAKE, sj.seq, sj.version, sj))

    def after_finishes(self, now: float, same: bool) -> bool:
        """Jobs finished at ``now``: keys that changed with them, progress."""
        ranker = self.ranker
        ep = ranker.epoch()
        if ep != self.epoch:
            self.epoch = ep
            self.rekey(now)
            if self.touched is not None:
                self.touched()  # all re-keyed already
        elif self.touched is not None:
            moved = self.touched()
            if moved:
                same = False
                self.rekey_some(moved, now)
        if self.on_finish is not None:
            self.on_finish(now, len(self.finished))
        return same

    def schedule(self, now: float, done: bool, same: bool) -> None:
        """One pass of the discipline at ``now``."""
        discipline = self.discipline
        if self.typed:
            self.placer.crowded = self.waiting_gpus > self.placer.free_total
        if self.grouped:
            if self.grouped_run:
                self.pass_grouped_preemptive(now)
            else:
                self.pass_grouped_fit(now, skip=discipline == "firstfit")
        elif self.ranked_run or self.typed_select:
            if same and not done:
                return
            v = self.placer.free_ver
            (self.pass_preemptive_typed if self.typed_select else self.pass_preemptive)(now)
            self.idle_ver = v if self.placer.free_ver == v else -1
        elif discipline == "preemptive":
            self.pass_preemptive(now)
        elif self.book is not None:
            self.book.lease_pass(now)
        elif discipline == "lease":
            self.pass_lease(now)
        elif discipline == "backfill":
            self.pass_backfill(now)
        else:
            self.pass_strict(now, skip=discipline == "firstfit")


def run_cluster(
    jobs: list,
    spec: ClusterSpec,
    ranker: Ranker,
    cost: PreemptionCost,
    *,
    spread: bool = False,
    model_info: dict | None = None,
    fast: bool = True,
    on_finish: Callable[[float, int], None] | None = None,
    dispatch: Dispatch | None = None,
    types: TypeSetup | None = None,
    power: PowerSave | None = None,
) -> ClusterResult:
    """Simulate ``jobs`` (model Jobs, in trace order) on one cluster until all have finished.

    ``fast=False`` turns off the per-account queues and the per-account usage charging (the
    reference path the tests compare against). ``on_finish(now, finished)`` is called after
    every event time at which jobs finished (progress reports). ``dispatch``: the scheduler's
    own overheads (see the module docstring); none by default. ``types``: on a cluster of
    several GPU types, the type choice and the throughput model (:mod:`.typed`). ``power``:
    node power states and their energy (:mod:`.power`); none by default (always on)."""
    total = spec.total_gpus
    too_big = [j for j in jobs if j.num_gpus > total]
    if too_big:
        big = max(too_big, key=lambda j: j.num_gpus)
        ids = ", ".join(str(j.job_id) for j in too_big[:2]) + (", …" if len(too_big) > 2 else "")
        raise ValueError(
            f"{len(too_big)} jobs too big for {spec.name!r} ({total} GPUs): {ids} (max {big.num_gpus})"
        )
    if spec.typed:
        if spread:
            raise ValueError(
                "--spread: not with several GPU types or node sizes (a job's GPUs are all of one group)"
            )
        types = types or TypeSetup()
        if types.prior is not None and types.model is not None and types.choice == "aware":
            from .typed_learn import LearningPlacer

            placer = LearningPlacer(spec.groups, types.model, types.prior, types.recorded)
        else:
            placer = TypedPlacer(spec.groups, types.choice, types.model, types.recorded)
        ranker.use_charges(placer.mean_charge)
    else:
        placer = FlatPlacer(spec.nodes, spec.gpus_per_node, spread, model_info)
    # the lease decision seeks a job's victims on its fastest type (none on one type)
    ranker.types_placer = placer if spec.typed else None
    model = powered(placer, power, jobs) if power and jobs else None
    eng = Engine(
        jobs, placer, ranker, cost, fast=fast, on_finish=on_finish, dispatch=dispatch, power=model
    )
    sims = eng.run()
    energy = model.close(max(sj.end_time or 0.0 for sj in sims)) if model is not None else None
    return ClusterResult(
        spec,
        sims,
        eng.qd,
        eng.preemptions,
        None if placer.flat else placer.type_busy(),
        eng.moves,
        energy,
    )


def fewest_nodes(jobs: list, gpus_per_node: int) -> int:
    """The fewest nodes that fit the largest job (at least one)."""
    return max([1] + [min_nodes(j.num_gpus, gpus_per_node) for j in jobs])


RunFn = Callable[..., ClusterResult]
