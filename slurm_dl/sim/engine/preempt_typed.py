"""The ``preemptive`` discipline on several GPU types (see :mod:`.loop` and :mod:`.typed`).

The selection walks pending and running jobs together in the policy's order, as on one type,
but counts free capacity per node group: a running job keeps its group while the jobs ranked
above it leave room there (else it is preempted); a waiting job asks the placer which group it
should take among those with room (``TypedPlacer.choose``), and may decline them all to wait
for a faster type while jobs ranked below it would use those GPUs better. A declined job takes
no capacity, so what it left goes to the jobs below it in the same pass; jobs it declined for
that nobody else took are offered to it again at the end of the pass.
"""

from __future__ import annotations

from ...core.config import PreemptionConfig
from ...core.fairness import INF
from .state import SimJob

SKIP_LIMIT = 256  # waiting jobs passed over in one walk before it stops looking further
# a running job of an account within its fair share moves to a type this much faster for it:
# the site config's [preemption] move_min_speedup, as in the prioritizer (this without one)
MOVE_GAIN: float = PreemptionConfig.model_fields["move_min_speedup"].default


class TypedPasses:
    """Mixin of :class:`~.loop.Engine`."""

    def pass_preemptive_typed(self, now: float) -> None:
        if not self.pending:
            return
        pk, pj, rk, rj = self._typed_order(now)
        placer = self.placer
        cap = list(placer.group_sizes)
        free = list(placer.gft)
        left = placer.total
        kept: set[int] = set()
        chosen: list[tuple[SimJob, int]] = []
        declined: list[tuple[SimJob, int]] = []  # (job, its place in pj)
        best = np_ = len(pj)  # the place of the best waiting job chosen
        i = j = 0
        nr = len(rj)
        while left > 0 and (i < np_ or j < nr) and len(declined) < SKIP_LIMIT:
            if j < nr and (i >= np_ or rk[j] <= pk[i]):
                sj = rj[j]
                j += 1
                g = placer.group_of(sj.alloc)
                if cap[g] >= sj.gpus:
                    cap[g] -= sj.gpus
                    left -= sj.gpus
                    kept.add(sj.seq)
                continue
            sj = pj[i]
            i += 1
            if sj.gpus > left:
                continue
            g = placer.choose(sj, cap, free, strict=True)
            if g is None:
                declined.append((sj, i - 1))
                continue
            cap[g] -= sj.gpus
            free[g] -= sj.gpus
            left -= sj.gpus
            chosen.append((sj, g))
            best = min(best, i - 1)
        for sj, at in declined:  # what nobody ranked below took: offered again, without declining
            g = placer.choose(sj, cap, free, strict=False)
            if g is not None:
                cap[g] -= sj.gpus
                free[g] -= sj.gpus
                chosen.append((sj, g))
                best = min(best, at)
        if left > 0 and j < nr:  # the walk stopped early: the rest keep their GPUs
            kept.update(sj.seq for sj in rj[j:])
        if self.ranker.hysteresis and chosen:
            victims = self.spare_close_keyed(
                [(k, sj) for k, sj in zip(rk, rj) if sj.seq not in kept],
                (pk[best], pj[best]),
                now,
                pk,
                rk,
            )
        else:
            victims = [sj for sj in self.running if sj.seq not in kept]
        self._start_typed(chosen, victims, now)

    def _typed_order(self, now: float) -> tuple[list, list, list, list]:
        """The keys and jobs of the waiting and of the running jobs, each in the policy's order
        now (the engine's own sorted lists where it keeps them: a pass reads only as far as it
        walks)."""
        ranker = self.ranker
        if self.sorted_pending:
            pk, pj = self.pending_keys, self.pending
        else:
            pend = sorted(((ranker.key(sj, now), sj) for sj in self.pending), key=lambda x: x[0])
            pk, pj = [k for k, _ in pend], [sj for _, sj in pend]
        if self.ranked_run:
            return pk, pj, self.rkeys, self.rjobs
        if self.cached_running:
            run = sorted(((sj.static_key, sj) for sj in self.running), key=lambda x: x[0])
        else:
            run = sorted(((ranker.key(sj, now), sj) for sj in self.running), key=lambda x: x[0])
        return pk, pj, [k for k, _ in run], [sj for _, sj in run]

    def _start_typed(
        self, chosen: list[tuple[SimJob, int]], victims: list[SimJob], now: float
    ) -> None:
        """Preempt ``victims``, then start each chosen job on its group (in rank order); one
        whose GPUs do not place there (free GPUs in pieces) keeps waiting."""
        if not chosen:
            return
        victims.sort(key=lambda s: s.seq)
        for sj in victims:
            self.preempt(sj, now)
        placer = self.placer
        started = set()
        for sj, g in chosen:
            alloc = placer.place_in(g, sj.gpus)
            if alloc is None:
                continue
            if self.sorted_pending:
                self.take_pending(sj)
            else:
                started.add(sj.seq)
            self.start(sj, alloc, now)
        if started:
            self.pending[:] = [s for s in self.pending if s.seq not in started]

    def upgrade_behind(self, now: float, rho: dict) -> None:
        """Fair share on several types: a running job of an account below its fair share or
        asking no more than it (``rho``: those accounts' finish-time fairness estimates; see
        :func:`slurm_dl.core.fairness.entitled`) that runs on a type at least
        ``move_gain`` times slower for it than a type it accepts with room moves there
        (checkpoint, restart) before the waiting jobs are given the free GPUs, where the time
        it would save is more than its restart, the worst-off account first (the time saved
        reckoned on the work it has done so far, as the work left is not known). It takes room on nodes
        already in use only, never a whole free node (a wide waiting job needs those); its old
        GPUs go to the waiting jobs. Without it, an account's long job that started on a slow
        type when nothing else was free stays there, and the account's finish time is set by
        that type."""
        placer = self.placer
        if placer.free_total <= 0 or not self.move_gain:
            return
        restart = self.cost.restart
        gain = self.move_gain
        cands = []
        for sj in self.running:
            t = rho.get(sj.account)
            if t is None:
                continue
            g0 = placer.group_of(sj.alloc)
            rates = placer.seen(sj)  # as the choice knows them (learnt, or the true ones)
            r0 = rates[g0]
            if r0 * gain > 1.0:
                continue  # no type is fast enough for it to move
            best = None
            for g in placer.allowed(sj):
                if (
                    placer.gft[g] >= sj.gpus
                    and rates[g] >= gain * r0
                    and (best is None or rates[g] > rates[best])
                ):
                    best = g
            if best is None:
                continue
            # the work left is not known (nor to the prioritizer): taken as the work done so
            # far (at full speed), as LAS takes a job that has run long to run long still
            left = (sj.executed0 + now - sj.seg_start) * r0
            saved = left / r0 - left / rates[best]
            if saved <= restart(sj.gpus) or self.ranker.yield_from(sj) == INF:
                continue
            cands.append((-t, sj.seq, sj, best))
        flat = placer.free
        for _, _, sj, g in sorted(cands, key=lambda c: c[:2]):
            alloc = placer.place_in(g, sj.gpus)
            if alloc is None or any(flat[i] == placer.per[g] for i, _ in alloc):
                continue  # (best fit: no node in use has room for it)
            self.preempt(sj, now)
            if self.book is None:
                self.pending.remove(sj)
            self.start(sj, alloc, now)
            self.moves += 1
