"""The ``preemptive`` discipline over one queue: pending and running jobs ranked together,
selected greedily while their GPUs fit in the cluster, the running ones left out preempted
(see :mod:`.loop`).

A running job left out keeps its GPUs when the best waiting job chosen does not beat its score
by the site's ``[preemption] hysteresis`` (:meth:`PreemptivePasses.spare_close`), as in the
prioritizer: its scores are ranks over the waiting and running jobs (1.0 first, 0.0 last), so a
victim must rank at least ``hysteresis × (n − 1)`` places below that job. A chosen job whose
GPUs a spared job keeps waits on."""

from __future__ import annotations

import bisect
from itertools import accumulate
from typing import Callable

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
        first = -1  # the best chosen waiting job's place in the order
        for r, sj in enumerate(cands):
            if sj.gpus <= quota:
                quota -= sj.gpus
                if sj.running:
                    selected_running.add(sj.seq)
                else:
                    if first < 0:
                        first = r
                    chosen.append(sj)
        if not chosen:
            return
        if self.ranker.hysteresis:
            victims = self.spare_close(
                [
                    (r, sj)
                    for r, sj in enumerate(cands)
                    if sj.running and sj.seq not in selected_running
                ],
                (first, cands[first]),
                len(cands),
                now,
            )
        else:
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
        victims = [(k, sj) for k, sj in rk if sj.seq not in selected_running]
        if self.ranker.hysteresis and victims:
            run_keys = [k for k, _ in rk]
            victims = self.spare_close_keyed(
                victims, (pending_keys[chosen[0]], pending[chosen[0]]), now, pending_keys, run_keys
            )
        else:
            victims = [sj for _, sj in victims]
        self.start_chosen(chosen, victims, now)

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
        if self.ranker.hysteresis and victims:
            victims = self.spare_close_keyed(
                [(sj.static_key, sj) for sj in victims],
                (pending_keys[chosen[0]], pending[chosen[0]]),
                now,
                pending_keys,
                rkeys,
            )
        self.start_chosen(chosen, victims, now)

    def spare_close(
        self,
        victims: list[tuple],
        best: tuple,
        n: int,
        now: float,
        below: Callable | None = None,
    ) -> list:
        """The ``victims`` (``(key, job)`` each) whose score the best waiting job chosen
        (``best``: its key and job) beats by the hysteresis, among ``n`` jobs waiting and
        running; ``below(key)`` counts the jobs ranked before a key (without it, keys are
        places in the order)."""
        h = self.ranker.hysteresis
        if n < 2:
            return [sj for _, sj in victims]
        place = below or (lambda k: k)
        r0 = place(best[0])
        need = (h - 1e-12) * (n - 1)
        return [sj for k, sj in victims if place(k) - r0 >= need]

    def spare_close_keyed(
        self, victims: list[tuple], best: tuple, now: float, pending_keys: list, running_keys: list
    ) -> list:
        """:meth:`spare_close` over the sorted keys of the waiting and the running jobs."""
        bl = bisect.bisect_left

        def below(k) -> int:
            return bl(pending_keys, k) + bl(running_keys, k)

        return self.spare_close(victims, best, len(pending_keys) + len(running_keys), now, below)

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
