"""The ``preemptive`` discipline over one queue: pending and running jobs ranked together,
selected greedily while their GPUs fit in the cluster, the running ones left out preempted
(see :mod:`.loop`)."""

from __future__ import annotations

import bisect
from itertools import accumulate

from .state import SimJob


class PreemptivePasses:
    """Mixin of :class:`~.loop.Engine`."""

    def pass_preemptive(self, now: float) -> None:
        pending, running, ranker = self.pending, self.running, self.ranker
        if not pending:
            return
        if self.sorted_pending:
            self.pass_preemptive_sorted(now)
            return
        cands = pending + running
        if self.cached_running:  # a running job's key is re-read only at its wake-ups
            cands.sort(key=lambda s: s.static_key if s.running else ranker.key(s, now))
        else:
            cands.sort(key=lambda s: ranker.key(s, now))
        quota = self.total
        chosen: list[SimJob] = []
        selected_running: set[int] = set()
        for sj in cands:
            if sj.gpus <= quota:
                quota -= sj.gpus
                if sj.running:
                    selected_running.add(sj.seq)
                else:
                    chosen.append(sj)
        if not chosen:
            return
        victims = [sj for sj in running if sj.seq not in selected_running]
        victims.sort(key=lambda s: s.seq)
        for sj in victims:
            self.preempt(sj, now)
        started = set()
        for sj in chosen:
            alloc = self.placer.place(sj)
            if alloc is not None:
                self.start(sj, alloc, now)
                started.add(sj.seq)
        if started:
            pending[:] = [s for s in pending if s.seq not in started]

    def pass_preemptive_sorted(self, now: float) -> None:
        """Merge the sorted pending queue with the running jobs ranked now; stop when full."""
        if self.ranked_run:
            self.pass_preemptive_ranked(now)
            return
        pending, pending_keys, ranker = self.pending, self.pending_keys, self.ranker
        rk = sorted(((ranker.key(sj, now), sj) for sj in self.running), key=lambda x: x[0])
        quota = self.total
        chosen: list[int] = []
        selected_running: set[int] = set()
        i = j = 0
        np_, nr = len(pending), len(rk)
        while quota > 0 and (i < np_ or j < nr):
            if j >= nr or (i < np_ and pending_keys[i] < rk[j][0]):
                sj = pending[i]
                if sj.gpus <= quota:
                    quota -= sj.gpus
                    chosen.append(i)
                i += 1
            else:
                sj = rk[j][1]
                if sj.gpus <= quota:
                    quota -= sj.gpus
                    selected_running.add(sj.seq)
                j += 1
        if not chosen:
            return
        self.start_chosen(
            chosen, [sj for sj in self.running if sj.seq not in selected_running], now
        )

    def _fill_free(self, now: float) -> None:
        """Every running job outranks every waiting one: nothing to preempt, fill free GPUs."""
        quota = self.placer.free_total
        if quota == 0:
            return
        chosen = []
        for i, sj in enumerate(self.pending):
            if sj.gpus <= quota:
                quota -= sj.gpus
                chosen.append(i)
                if quota == 0:
                    break
        if chosen:
            self.start_chosen(chosen, [], now)

    def pass_preemptive_ranked(self, now: float) -> None:
        """The same merge with the running jobs' cached keys kept sorted (``rkeys``): a run of
        running jobs that rank between two waiting ones and fit together is taken in one step
        (prefix sums of their GPUs), so a pass costs about the number of waiting jobs it looks
        at, not the number running."""
        pending, pending_keys = self.pending, self.pending_keys
        rkeys, rjobs, rgpus = self.rkeys, self.rjobs, self.rgpus
        if not rjobs or pending_keys[0] > rkeys[-1]:
            self._fill_free(now)
            return
        cum = list(accumulate(rgpus))
        quota = self.total
        chosen: list[int] = []
        victims: list[SimJob] = []
        i = j = 0
        np_, nr = len(pending), len(rjobs)
        while quota > 0 and (i < np_ or j < nr):
            b = bisect.bisect_right(rkeys, pending_keys[i], j) if i < np_ else nr
            if b > j:  # running jobs j..b-1 rank before waiting job i
                block = cum[b - 1] - (cum[j - 1] if j else 0)
                if block < quota:
                    quota -= block
                    j = b
                    continue
                while j < b and quota > 0:
                    g = rgpus[j]
                    if g <= quota:
                        quota -= g
                    else:
                        victims.append(rjobs[j])
                    j += 1
                continue
            sj = pending[i]
            if sj.gpus <= quota:
                quota -= sj.gpus
                chosen.append(i)
            i += 1
        if not chosen:
            return
        victims.extend(rjobs[j:])
        self.start_chosen(chosen, victims, now)

    def start_chosen(self, chosen: list[int], victims: list[SimJob], now: float) -> None:
        """Preempt ``victims`` then place the pending jobs at indexes ``chosen`` in rank order;
        one that cannot be placed stays where it waits (its key is unique: no other moves)."""
        pending, pending_keys, placer = self.pending, self.pending_keys, self.placer
        if not victims:  # the indexes stay valid: take the started ones out from the back
            started = []
            for i in chosen:
                sj = pending[i]
                alloc = placer.place(sj)
                if alloc is not None:
                    self.start(sj, alloc, now)
                    started.append(i)
            for i in reversed(started):
                del pending[i]
                del pending_keys[i]
            return
        chosen_jobs = [pending[i] for i in chosen]
        victims.sort(key=lambda s: s.seq)
        for sj in victims:
            self.preempt(sj, now)
        for sj in chosen_jobs:
            alloc = placer.place(sj)
            if alloc is not None:
                self.take_pending(sj)
                self.start(sj, alloc, now)
