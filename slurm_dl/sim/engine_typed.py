"""The ``preemptive`` discipline on several GPU types (see :mod:`.engine` and :mod:`.typed`).

The selection walks pending and running jobs together in the policy's order, as on one type,
but counts free capacity per node group: a running job keeps its group while the jobs ranked
above it leave room there (else it is preempted); a waiting job asks the placer which group it
should take among those with room (``TypedPlacer.choose``), and may decline them all to wait
for a faster type while jobs ranked below it would use those GPUs better. A declined job takes
no capacity, so what it left goes to the jobs below it in the same pass; jobs it declined for
that nobody else took are offered to it again at the end of the pass.
"""

from __future__ import annotations

from .state import SimJob

SKIP_LIMIT = 256  # waiting jobs passed over in one walk before it stops looking further


class TypedPasses:
    """Mixin of :class:`~.engine.Engine`."""

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
        declined: list[SimJob] = []
        i = j = 0
        np_, nr = len(pj), len(rj)
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
                declined.append(sj)
                continue
            cap[g] -= sj.gpus
            free[g] -= sj.gpus
            left -= sj.gpus
            chosen.append((sj, g))
        for sj in declined:  # what nobody ranked below took: offered again, without declining
            g = placer.choose(sj, cap, free, strict=False)
            if g is not None:
                cap[g] -= sj.gpus
                free[g] -= sj.gpus
                chosen.append((sj, g))
        if left > 0 and j < nr:  # the walk stopped early: the rest keep their GPUs
            kept.update(sj.seq for sj in rj[j:])
        self._start_typed(chosen, [sj for sj in self.running if sj.seq not in kept], now)

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

    def _start_typed(self, chosen: list[tuple[SimJob, int]], victims: list[SimJob], now: float) -> None:
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
