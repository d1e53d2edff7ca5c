"""The ranker's side of fair share with leases (the engine's ``lease`` discipline): the core
decision (:mod:`slurm_dl.core.fairness`) on the engine's jobs, with the within-account keys
cached. A mixin of :class:`~slurm_dl.sim.ranking.ranker.PolicyRanker`."""

from __future__ import annotations

import dataclasses
import math

from ...core.fairness import NodeView, plan_fair_preemptions, standings, yield_from
from ..engine.state import SimJob

INF = math.inf
_MARGIN = 1e-3  # far more than rounding to 6 decimals moves a value (see lease_moves)


class LeaseRanking:
    """What :class:`~slurm_dl.sim.ranking.ranker.PolicyRanker` does for the ``lease`` discipline."""

    # --- fair share with leases (discipline "lease"): the core decision, on the engine's jobs ---
    def _within(self, j) -> tuple:
        """The policy's within-account key; a waiting job's changes only when it runs (cached),
        unless a starvation guard promotes waiting jobs as time passes."""
        if j.running or self.policy.las.starvation_factor is not None:
            return self.policy.within_key(j, self.ctx)
        c = self._lease_keys.get(j.job_id)
        if c is None or c[0] != j.attained_gpu_s:
            c = self._lease_keys[j.job_id] = (j.attained_gpu_s, self.policy.within_key(j, self.ctx))
        return c[1]

    def lease_fill_order(self, pending: list, running: list, total: int, now: float) -> list:
        """Waiting jobs in the policy's order given the accounts' standings now (what
        ``FairShareLeasePolicy.fill_key`` gives, from the cached within-account keys)."""
        jp = [self._sync(s, now) for s in pending]
        tier = self.lease_tiers(pending, running, total, now)
        within = self._within
        keyed = sorted((within(j)[0], tier[j.account], within(j), i) for i, j in enumerate(jp))
        return [pending[k[3]] for k in keyed]

    def lease_standings(self, pending: list, running: list, total: int, now: float) -> dict:
        """The accounts' standings now (GPUs held counted at their type's speed)."""
        jp = [self._sync(s, now) for s in pending]
        jr = [self._sync(s, now) for s in running]
        return self._held_at_speed(standings(jp, jr, total, now, self.policy.settings), running)

    def lease_tiers(self, pending: list, running: list, total: int, now: float) -> dict:
        """Per account, its tier in the fill order now: ``(0, -ρ)`` below its fair share (the
        worst finish-time fairness estimate first), ``(1, 0.0)`` at or above it."""
        st = self.lease_standings(pending, running, total, now)
        return {a: ((0, -s.rho) if s.held < s.fair else (1, 0.0)) for a, s in st.items()}

    def lease_settings(self):
        """The policy's lease settings with the engine's restart cost (the lease excludes it)."""
        pol = self.policy
        settings = pol.settings
        if self.restart_s is not None and settings.restart_s != self.restart_s:
            settings = pol.settings = dataclasses.replace(settings, restart_s=self.restart_s)
        return settings

    def yield_from(self, sj: SimJob) -> float:
        """From when running ``sj`` may yield its GPUs in this run (its lease end; ``INF``:
        never); constant while it runs (:func:`slurm_dl.core.fairness.yield_from`)."""
        return yield_from(sj.job, self.lease_settings(), self.config)

    def lease_run_key(self, sj: SimJob, now: float) -> tuple:
        """Running ``sj``'s within-account key at ``now`` (what the policy gives), cached.

        The key (LAS queue, 0, submit, id) changes only when its attained service (as the
        policy rounds it: to 6 decimals) crosses a threshold: cached per run until then.
        Rounding is monotone and moves a value by far less than ``_MARGIN``, so a value that
        far inside the cached range rounds inside it too."""
        las = self.policy.las
        dt = now - sj.seg_start
        if self._charged:  # service at the type's speed (use_charges)
            a = sj.served0 + dt * sj.charge
            if not las.by_time:
                a *= sj.gpus
        else:
            a = sj.executed0 + dt if las.by_time else sj.attained0 + sj.gpus * dt
        c = self._run_keys.get(sj.seq)
        if c is not None and c[0] == sj.version:
            if c[1] + _MARGIN <= a < c[2] - _MARGIN:
                return c[3]
            a = round(a, 6)
            if c[1] <= a < c[2]:
                return c[3]
        self.ctx.now = now
        k = self._within(self._sync(sj, now))
        q = k[0]
        th = las.thresholds
        self._run_keys[sj.seq] = (
            sj.version,
            th[q - 1] if q > 0 else -INF,
            th[q] if q < len(th) else INF,
            k,
        )
        return k

    def lease_key_check(self, sj: SimJob) -> float:
        """Before when running ``sj``'s cached key (:meth:`lease_run_key`) cannot change: its
        attained service is then below the cached range's end by more than ``_MARGIN``."""
        c = self._run_keys[sj.seq]
        las = self.policy.las
        rate = 1.0 if las.by_time else sj.gpus
        if c[2] == INF or rate <= 0:
            return INF
        if self._charged:
            base = sj.served0 * (1.0 if las.by_time else sj.gpus)
            rate *= sj.charge
        else:
            base = sj.executed0 if las.by_time else sj.attained0
        return sj.seg_start + (c[2] - 2 * _MARGIN - base) / rate

    def lease_moves(
        self,
        pending: list,
        running: list,
        total: int,
        free: int,
        now: float,
        standing=None,
        node_free: list[int] | None = None,
        per_node: int | None = None,
        waiting=None,
        running_by_id: dict | None = None,
        yields: dict | None = None,
        allocs: dict | None = None,
        keys: dict | None = None,
        ranked: dict | None = None,
        may_yield=None,
        node_sizes: list[int] | None = None,
    ):
        """[(victims, need)] SimJobs from :func:`plan_fair_preemptions`, and its ``wake_at``.
        ``standing``: the accounts' standings now, when the engine keeps them. ``node_free``
        (free GPUs per node index) and ``per_node``: where the GPUs are, so that a job needing
        one node is not taken for started on GPUs free on many. ``waiting``: job id -> waiting
        SimJob whose ``pend_key`` is its within-account key (the engine's lease book); then
        ``pending`` is the book's per-account :class:`~slurm_dl.core.waiting.WaitingJobs`; the
        book also keeps, per running job id, ``running_by_id`` (the SimJob), ``yields`` (its
        :meth:`yield_from`) and ``allocs`` (its (node, GPUs) pairs); ``keys``: every waiting and
        running job's within-account key now (job id -> key), when the book keeps them so;
        ``ranked``: per account, its running jobs in that order (kept by the book);
        ``may_yield``: the book's kept answer of which of them may yield now; ``node_sizes``:
        each node's GPUs where they differ (node groups)."""
        settings = self.lease_settings()
        within = self._within
        level = None
        queues = None
        if waiting is None:
            jp = [self._sync(s, now) for s in pending]
            jr = [self._sync(s, now) for s in running]
        else:  # a waiting job's figures are current already; its key is the one the book keeps;
            # a running job's figures are brought up to now only when the decision reads its key
            self.ctx.now = now
            jp = []
            # the decision does not read the running jobs when the book ranks them and keeps
            # the standings
            jr = [] if ranked is not None and standing is not None else [s.job for s in running]
            queues = pending
            by_run = (
                running_by_id if running_by_id is not None else {s.job.job_id: s for s in running}
            )
            run_key = self.lease_run_key
            if keys is not None:  # the book keeps every job's key current (see lease_key_check)

                def within(j, _keys=keys):
                    return _keys[j.job_id]

                def level(j, _keys=keys):
                    return _keys[j.job_id][0]
            else:

                def within(j, _get=waiting.get):
                    sj = _get(j.job_id)
                    return sj.pend_key if sj is not None else run_key(by_run[j.job_id], now)

        if level is None:  # the LAS queue: the key's first item

            def level(j):
                return within(j)[0]

        nodes = None
        if node_free is not None and per_node:
            alloc = allocs if allocs is not None else {s.job.job_id: s.alloc for s in running}
            sizes = self._node_sizes
            if sizes[0] != (len(node_free), per_node):  # the cluster's node sizes, made once
                size = (
                    dict(enumerate(node_sizes))
                    if node_sizes
                    else dict.fromkeys(range(len(node_free)), per_node)
                )
                sizes = self._node_sizes = ((len(node_free), per_node), size)
            nodes = NodeView(
                size=sizes[1], free=dict(enumerate(node_free)), alloc=alloc, kind=self._kinds()
            )
        if standing is None and self._charged:
            standing = self._held_at_speed(standings(jp, jr, total, now, settings), running)
        plan = plan_fair_preemptions(
            jp,
            jr,
            total,
            now,
            settings,
            self.config,
            order=within,
            level=level,
            free_gpus=free,
            standing=standing,
            nodes=nodes,
            waiting=queues,
            yields=yields,
            ranked=ranked,
            may_yield=may_yield,
            speeds=self._lease_speeds(pending, waiting) if nodes is not None else None,
        )
        if not plan.moves:
            return [], plan.wake_at
        by_id = (
            dict(running_by_id) if running_by_id is not None else {s.job.job_id: s for s in running}
        )
        if waiting is None:
            by_id.update((s.job.job_id, s) for s in pending)
        else:
            by_id.update((m.need, waiting[m.need]) for m in plan.moves)
        return [([by_id[v] for v in m.victims], by_id[m.need]) for m in plan.moves], plan.wake_at

    # --- several GPU types: the victims' type (lease_victims_by_type) ---------------------------
    types_placer = None  # the engine's placer on several GPU types (set by the engine)

    def _kinds(self) -> dict:
        """Per node index, its group (one GPU type each) on several types; else empty."""
        placer = self.types_placer
        return {} if placer is None else dict(enumerate(placer.node_group))

    def _lease_speeds(self, pending, waiting):
        """A waiting job's speed on each group as the type choice knows it (``None``: one
        type): what the decision reads to seek its victims on its fastest type."""
        placer = self.types_placer
        if placer is None:
            return None
        sims = waiting if waiting is not None else {s.job.job_id: s for s in pending}

        def speeds(j):
            return dict(enumerate(placer.seen(sims[j.job_id])))

        return speeds
