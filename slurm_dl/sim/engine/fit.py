"""The disciplines that only start jobs on free GPUs (``strict``, ``firstfit``, ``backfill``)
and the reference ``lease`` pass (see :mod:`.loop`)."""

from __future__ import annotations

from ...core.fairness import entitled
from .state import SimJob


class FitPasses:
    """Mixin of :class:`~.loop.Engine`: passes over the waiting queue in key order."""

    def pass_strict(self, now: float, skip: bool) -> None:
        if not self.sorted_pending:  # else kept in key order as jobs arrive, wake and re-key
            self.sort_pending(now)
        pending, placer = self.pending, self.placer
        i = 0
        while i < len(pending):
            if placer.free_total == 0:
                break
            sj = pending[i]
            alloc = placer.place(sj)
            if alloc is None:
                if not skip:
                    break
                i += 1
                continue
            del pending[i]
            if self.sorted_pending:
                del self.pending_keys[i]
            self.start(sj, alloc, now)

    @staticmethod
    def est_end(sj: SimJob) -> float:
        lim = sj.job.time_limit if sj.job.time_limit else sj.duration
        return sj.seg_start + max(0.0, lim - sj.executed0)

    def pass_backfill(self, now: float) -> None:
        """EASY backfill in key order: the first job that does not fit reserves the GPUs it
        waits for; a later job starts now only if it ends before that reservation or takes
        GPUs the reserved job leaves spare. On node groups (several GPU types) a reservation
        holds one group (the one where the job's wait is shortest) and only jobs landing there
        are held to it, as Slurm's reservations hold nodes: each group has its own first
        waiting job, and a job waiting for an H100 never holds back a V100."""
        if not self.sorted_pending:
            self.sort_pending(now)
        pending, placer = self.pending, self.placer
        held: dict[int, list] = {}  # group (0 on one type) -> [shadow time, GPUs spare then]
        i = 0
        while i < len(pending) and placer.free_total > 0:
            sj = pending[i]
            alloc = placer.place(sj)
            if alloc is None:
                if not (held and (not self.typed or all(g in held for g in placer.allowed(sj)))):
                    g, shadow, extra = self._shadow(sj, now)  # only where it can add a reservation
                    held.setdefault(g, [shadow, extra])
                i += 1
                continue
            hold = held.get(placer.group_of(alloc) if self.typed else 0)
            if hold is not None and now + (sj.job.time_limit or sj.duration) > hold[0]:
                if sj.gpus > hold[1]:
                    i += 1
                    continue
                hold[1] -= sj.gpus
            del pending[i]
            if self.sorted_pending:
                del self.pending_keys[i]
            self.start(sj, alloc, now)

    def _shadow(self, sj: SimJob, now: float) -> tuple[int, float, int]:
        """The reservation of a job that does not fit: (its group, when enough GPUs are free
        there for it from the running jobs' estimated ends, the GPUs spare there then). On one
        type the group is 0 and counts every GPU."""
        if not self.typed:
            return (0, *self._shadow_in(sj, now, self.placer.free_total, self.running))
        placer = self.placer
        best = None
        for g in placer.allowed(sj):
            there = [s for s in self.running if placer.group_of(s.alloc) == g]
            shadow, extra = self._shadow_in(sj, now, placer.gft[g], there)
            if best is None or shadow < best[1]:
                best = (g, shadow, extra)
        return best

    def _shadow_in(self, sj: SimJob, now: float, avail: int, running) -> tuple[float, int]:
        shadow = now
        for s in sorted(running, key=self.est_end):
            if avail >= sj.gpus:
                break
            avail += s.gpus
            shadow = self.est_end(s)
        return shadow, avail - sj.gpus

    def fill(self, order: list[SimJob], now: float) -> None:
        started = set()
        placer = self.placer
        for sj in order:
            if placer.free_total == 0:
                break
            alloc = placer.place(sj)
            if alloc is not None:
                self.start(sj, alloc, now)
                started.add(sj.seq)
        if started:
            self.pending[:] = [s for s in self.pending if s.seq not in started]

    def apply_moves(self, moves: list, now: float) -> None:
        """The lease decision's moves: preempt each move's victims, start the job they yield to."""
        for victims, need in moves:
            for sj in sorted(victims, key=lambda s: s.seq):
                self.preempt(sj, now)
            alloc = self.placer.place(need, forced=True)
            if alloc is not None:
                if self.book is None:
                    self.pending.remove(need)
                self.start(need, alloc, now)

    def decision_due(self, now: float) -> bool:
        """May the lease decision run at ``now``? At most once per ``decide_every_s`` (a daemon
        decides once per cycle): if it ran more recently, a wake-up is set for then."""
        ticks = self.ticks
        if now < ticks[2]:
            self.tick_at(ticks[2])
            return False
        ticks[2] = now + self.ranker.decide_every_s
        return True

    def pass_lease(self, now: float) -> None:
        pending, placer, ranker = self.pending, self.placer, self.ranker
        if not pending:
            return
        if placer.free_total > 0:
            if self.typed:
                self.upgrade_behind(
                    now,
                    {
                        a: st.rho
                        for a, st in ranker.lease_standings(
                            pending, self.running, self.total, now
                        ).items()
                        if entitled(st)
                    },
                )
            self.fill(ranker.lease_fill_order(pending, self.running, self.total, now), now)
            if not pending:
                return
        if not self.decision_due(now):
            return
        moves, wake = ranker.lease_moves(
            pending, self.running, self.total, placer.free_total, now, **placer.node_view()
        )
        self.apply_moves(moves, now)
        if moves and placer.free_total > 0:
            self.fill(ranker.lease_fill_order(pending, self.running, self.total, now), now)
        if wake is not None:
            self.tick_at(max(wake, self.ticks[2]))
