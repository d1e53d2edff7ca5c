"""Per-account queues (fair share, alone or in ``combined``): each account keeps its waiting
(and, preemptive, running) jobs sorted by a per-job key; a pass merges the accounts' heads by
the real key (see :mod:`.loop`).

The merge heaps hold (real key, account, index, account's list): the key ends with the job id,
and (account, index) is unique, so the list itself is never compared. A pass reads keys through
``ranker.head_keyer`` (valid while the ledger does not change: no pass charges before its last
read).
"""

from __future__ import annotations

import bisect
import heapq

from .state import SimJob


class _Rev:
    """A heap entry ordered by descending key (the lowest-ranked job first); ``a``: the
    account's list of running jobs, ``i``: the job's index there."""

    __slots__ = ("k", "a", "i")

    def __init__(self, k: tuple, a: list, i: int) -> None:
        self.k, self.a, self.i = k, a, i

    def __lt__(self, other: "_Rev") -> bool:
        return other.k < self.k


def g_merge(groups: dict, hk, heap: list) -> None:
    for a, (_, js) in groups.items():
        if js:
            heap.append((hk(js[0]), a, 0, js))


def g_next(heap: list, hk) -> SimJob:
    """The job at the top of the merge; advances its account's list in the heap."""
    _, a, i, js = heap[0]
    sj = js[i]
    i += 1
    if i < len(js):
        heapq.heapreplace(heap, (hk(js[i]), a, i, js))
    else:
        heapq.heappop(heap)
    return sj


def g_next_within(heap: list, hk, quota: int) -> SimJob:
    """``g_next`` when the caller takes only jobs of at most ``quota`` GPUs, and its quota never
    grows: the account's list advances past the jobs that need more (each would be passed over
    at its turn), so their keys are never made."""
    _, a, i, js = heap[0]
    sj = js[i]
    i += 1
    n = len(js)
    while i < n and js[i].gpus > quota:
        i += 1
    if i < n:
        heapq.heapreplace(heap, (hk(js[i]), a, i, js))
    else:
        heapq.heappop(heap)
    return sj


def _head_gpus(heap: list) -> int:
    _, _, i, js = heap[0]
    return js[i].gpus


class _Walk:
    """The running jobs walked backward from the lowest ranked (``select_grouped``)."""

    __slots__ = ("rheap", "walked", "w_sum", "hk")

    def __init__(self, tails: list, hk) -> None:
        self.rheap = [_Rev(k, js, len(js) - 1) for k, js in tails]
        heapq.heapify(self.rheap)
        self.walked: list[tuple[tuple, SimJob]] = []  # lowest ranked first
        self.w_sum = 0
        self.hk = hk

    def step(self) -> tuple:
        rheap = self.rheap
        top = rheap[0]
        js = top.a
        sj = js[top.i]
        self.walked.append((top.k, sj))
        self.w_sum += sj.gpus
        if top.i > 0:
            heapq.heapreplace(rheap, _Rev(self.hk(js[top.i - 1]), js, top.i - 1))
        else:
            heapq.heappop(rheap)
        return top.k

    def below(self, key: tuple) -> bool:
        """Has the walk passed below ``key`` (its last walked job ranks above it)?"""
        return bool(self.walked) and self.walked[-1][0] < key


class GroupedPasses:
    """Mixin of :class:`~.loop.Engine`."""

    def pass_grouped_fit(self, now: float, skip: bool) -> None:
        placer = self.placer
        if placer.free_total == 0 or not self.n_waiting:
            return
        hk = self.ranker.head_keyer(now)
        heap: list = []
        g_merge(self.gp, hk, heap)
        heapq.heapify(heap)
        started = []
        while heap and placer.free_total > 0:
            sj = g_next(heap, hk)
            alloc = placer.place(sj)
            if alloc is None:
                if not skip:
                    break
                continue
            self.start(sj, alloc, now)
            started.append(sj)
        for sj in started:
            self.g_remove(self.gp, sj, sj.pend_key)
        self.n_waiting -= len(started)

    def pass_grouped_preemptive(self, now: float) -> None:
        if not self.n_waiting:
            return
        hk = self.ranker.head_keyer(now)
        heap: list = []
        g_merge(self.gp, hk, heap)
        best = min(h[0] for h in heap)  # the best waiting job's key (each account's head)
        tails = [(hk(js[-1]), js) for _, js in self.gr.values() if js]
        chosen: list[SimJob] = []
        if not tails or best > max(t[0] for t in tails):
            # every running job outranks every waiting one: nothing to preempt, fill free GPUs
            quota = self.placer.free_total
            heapq.heapify(heap)
            while heap and quota > 0:
                sj = g_next_within(heap, hk, quota)
                if sj.gpus <= quota:
                    quota -= sj.gpus
                    chosen.append(sj)
            if chosen:
                self.start_grouped(chosen, [], now)
            return
        heapq.heapify(heap)
        chosen, victims = self.select_grouped(heap, hk, tails)
        if chosen and victims and self.ranker.hysteresis:
            victims = self.spare_close(
                [(hk(sj), sj) for sj in victims],
                (hk(chosen[0]), chosen[0]),
                self.n_waiting + len(self.running),
                now,
                self.g_below(hk),
            )
        if chosen:
            self.start_grouped(chosen, victims, now)

    def g_below(self, hk):
        """How many waiting and running jobs rank before a key (``hk``: the pass's keys; each
        account's lists are in the order of their keys)."""
        bl = bisect.bisect_left
        lists = [js for g in (self.gp, self.gr) for _, js in g.values() if js]

        def below(k) -> int:
            return sum(bl(js, k, key=hk) for js in lists)

        return below

    def select_grouped(self, heap: list, hk, tails: list) -> tuple[list[SimJob], list[SimJob]]:
        """The preemptive selection (pending and running jobs in rank order, each taken while
        its GPUs fit in what is left of the cluster, until nothing is left) without walking
        every running job: ``heap`` merges the waiting jobs forward; the running jobs are
        walked backward from the lowest ranked (``tails``: each account's lowest, with its
        key), only as far as the choice needs.

        With ``free`` GPUs free and ``C`` GPUs chosen so far, the GPUs left just before a job
        ``x`` are ``free + R(x) - C`` while no running job has been skipped, where ``R(x)``
        counts the running jobs ranked at or below ``x``. The walked ones (the lowest ranked,
        ``w_sum`` GPUs) bound it from below, so a waiting job needing fewer GPUs than
        ``free + w_sum - C`` is taken, and every running job above the walked ones fits.
        Otherwise the walk goes on; once it has passed the last waiting job taken (or the
        waiting job in question), the rest is decided exactly over the walked jobs."""
        free = self.placer.free_total
        walk = _Walk(tails, hk)
        c_sum = 0
        chosen: list[SimJob] = []
        last = None  # key of the last waiting job taken
        exact = False
        while heap:
            pk = heap[0][0]
            # the running jobs between the last job taken and this one must fit: walk until
            # they do, or until every running job below the last one taken is walked
            while (
                free + walk.w_sum - c_sum <= 0
                and walk.rheap
                and not (last is not None and walk.below(last))
            ):
                walk.step()
            if free + walk.w_sum - c_sum <= 0 or walk.below(pk):
                exact = True
                break
            g = _head_gpus(heap)
            while g >= free + walk.w_sum - c_sum and walk.rheap:
                if walk.step() < pk:  # walked past this job: decide it exactly
                    break
            if g >= free + walk.w_sum - c_sum or walk.below(pk):
                exact = True
                break
            sj = g_next(heap, hk)
            chosen.append(sj)
            c_sum += sj.gpus
            last = pk
        return chosen, self._select_exact(heap, hk, walk, chosen, c_sum, last, exact)

    def _select_exact(
        self, heap: list, hk, walk: _Walk, chosen: list, c_sum: int, last, exact: bool
    ) -> list:
        """The rest of :meth:`select_grouped`, exactly, from just below the last waiting job
        taken: the walked jobs there in rank order, merged with the waiting jobs not yet
        decided. Appends to ``chosen``; returns the victims."""
        below = [x for x in reversed(walk.walked) if last is None or last < x[0]]
        quota = self.placer.free_total + sum(sj.gpus for _, sj in below) - c_sum
        victims: list[SimJob] = []
        j = 0
        nb = len(below)
        while quota > 0 and (j < nb or (exact and heap)):
            if exact and heap and (j >= nb or heap[0][0] < below[j][0]):
                sj = g_next_within(heap, hk, quota)
                if sj.gpus <= quota:
                    quota -= sj.gpus
                    chosen.append(sj)
                continue
            sj = below[j][1]
            j += 1
            if sj.gpus <= quota:
                quota -= sj.gpus
            else:
                victims.append(sj)
        victims.extend(sj for _, sj in below[j:])
        return victims

    def start_grouped(self, chosen: list[SimJob], victims: list[SimJob], now: float) -> None:
        # with unique keys a chosen job that does not fit stays where it is (the place it
        # would go back to); otherwise it is taken out first and put back after its equals
        gp, unique = self.gp, self.unique_keys
        if not unique:
            for sj in chosen:
                self.g_remove(gp, sj, sj.pend_key)
            self.n_waiting -= len(chosen)
        victims.sort(key=lambda s: s.seq)
        for sj in victims:
            self.preempt(sj, now)
        for sj in chosen:
            alloc = self.placer.place(sj)
            if alloc is not None:
                if unique:
                    self.g_remove(gp, sj, sj.pend_key)
                    self.n_waiting -= 1
                self.start(sj, alloc, now)
            elif not unique:  # back under the key it waits with (changes only at its wake-ups)
                self.g_insert(gp, sj, sj.pend_key, False)
                self.n_waiting += 1
