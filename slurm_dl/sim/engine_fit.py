"""The disciplines that only start jobs on free GPUs (``strict``, ``firstfit``, ``backfill``)
and the reference ``lease`` pass (see :mod:`.engine`)."""

from __future__ import annotations

from .state import SimJob


class FitPasses:
    """Mixin of :class:`~.engine.Engine`: passes over the waiting queue in key order."""

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
        if not self.sorted_pending:
            self.sort_pending(now)
        pending, placer = self.pending, self.placer
        shadow = None
        extra = 0
        i = 0
        while i < len(pending) and placer.free_total > 0:
            sj = pending[i]
            alloc = placer.place(sj)
            if shadow is None:
                if alloc is None:
                    shadow, extra = self._shadow(sj, now)
                    i += 1
                    continue
            else:
                if alloc is None:
                    i += 1
                    continue
                fits_before = now + (sj.job.time_limit or sj.duration) <= shadow
                if not fits_before:
                    if sj.gpus > extra:
                        i += 1
                        continue
                    extra -= sj.gpus
            del pending[i]
            if self.sorted_pending:
                del self.pending_keys[i]
            self.start(sj, alloc, now)

    def _shadow(self, sj: SimJob, now: float) -> tuple[float, int]:
        """The reservation of the first job that does not fit: when enough GPUs are free for
        it (from the running jobs' estimated ends), and the GPUs spare then."""
        avail = self.placer.free_total
        shadow = now
        for s in sorted(self.running, key=self.est_end):
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
            self.fill(ranker.lease_fill_order(pending, self.running, self.total, now), now)
            if not pending:
                return
        if not self.decision_due(now):
            return
        moves, wake = ranker.lease_moves(pending, self.running, self.total, placer.free_total, now,
                                         **placer.node_view())
        self.apply_moves(moves, now)
        if moves and placer.free_total > 0:
            self.fill(ranker.lease_fill_order(pending, self.running, self.total, now), now)
        if wake is not None:
            self.tick_at(max(wake, self.ticks[2]))
