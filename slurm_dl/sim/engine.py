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

Dispatch overheads (:class:`~slurm_dl.sim.state.Dispatch`, off by default): a finished job's
GPUs come back ``release_s`` after its end (Slurm: the job completing, its epilog, the node
reporting back), and scheduling passes run only every ``pass_s`` seconds (Slurm's
``sched_interval`` / ``bf_interval``) instead of at every event.
"""

from __future__ import annotations

import bisect
import heapq
import math
from itertools import accumulate
from operator import attrgetter
from dataclasses import dataclass, field
from typing import Any, Callable

from .lease import LeaseBook
from .placement import min_nodes, place_consolidated, place_spread, slowdown
from ..core.model import JobState
from .ranking import Ranker
from .state import Dispatch, PreemptionCost, SimJob

_DONE, _WAKE = 0, 1
INF = float("inf")


class _Tick:
    """A wake-up that belongs to no job (a lease ends): only makes a pass happen."""

    version = 0
    running = False


_TICK = _Tick()


@dataclass
class ClusterSpec:
    name: str
    nodes: int
    gpus_per_node: int = 8

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass
class ClusterResult:
    cluster: ClusterSpec
    jobs: list[SimJob]
    queue_deltas: list[tuple[float, int]] = field(default_factory=list)  # (time, Δ pending jobs)
    preemptions: int = 0


def run_cluster(
    jobs: list, spec: ClusterSpec, ranker: Ranker, cost: PreemptionCost,
    *, spread: bool = False, model_info: dict | None = None, fast: bool = True,
    on_finish: Callable[[float, int], None] | None = None, dispatch: Dispatch | None = None,
) -> ClusterResult:
    """Simulate ``jobs`` (model Jobs, in trace order) on one cluster until all have finished.

    ``fast=False`` turns off the per-account queues and the per-account usage charging (the
    reference path the tests compare against). ``on_finish(now, finished)`` is called after
    every event time at which jobs finished (progress reports). ``dispatch``: the scheduler's
    own overheads (see the module docstring); none by default."""
    per_node = spec.gpus_per_node
    total = spec.total_gpus
    too_big = [j for j in jobs if j.num_gpus > total]
    if too_big:
        big = max(too_big, key=lambda j: j.num_gpus)
        ids = ", ".join(str(j.job_id) for j in too_big[:2]) + (", …" if len(too_big) > 2 else "")
        raise ValueError(
            f"{len(too_big)} jobs too big for {spec.name!r} ({total} GPUs): {ids} (max {big.num_gpus})"
        )
    keep = getattr(ranker, "keep_unresumable", None)
    if keep is not None:  # jobs that cannot resume are never victims (pinned while they run)
        keep(jobs)
    sims = [SimJob(i, j) for i, j in enumerate(jobs)]
    arrivals = sorted(sims, key=lambda s: (s.submit, s.seq))
    free = [per_node] * spec.nodes
    free_total = total
    place = place_spread if spread else place_consolidated
    heap: list[tuple[float, int, int, int, Any]] = []  # SimJob, or _Tick for a wake-up
    running: list[SimJob] = []
    pending: list[SimJob] = []
    pending_keys: list[tuple] = []  # for static rankers: keys parallel to ``pending`` (sorted)
    qd: list[tuple[float, int]] = []
    discipline = ranker.discipline
    release_s = dispatch.release_s if dispatch is not None else 0.0
    pass_s = dispatch.pass_s if dispatch is not None else 0.0
    releases: list[tuple[float, int, tuple]] = []  # (time, seq, allocation) GPUs coming back
    static = ranker.static and discipline != "preemptive"
    # preemptive fast path: pending keys constant while waiting (kept sorted), running keys
    # constant between the ranker's next_change events (cached in ``static_key``)
    # pending keys may also be piecewise constant, changing only at the job's own next_change
    # (starvation promotion, deadline boost): kept sorted and re-inserted at those wake-ups
    piecewise = getattr(ranker, "pending_piecewise", False) and discipline != "lease"
    sorted_pending = static or getattr(ranker, "pending_static", False) or piecewise
    cached_running = getattr(ranker, "running_key_cached", False)
    by_cached_key = attrgetter("static_key")
    # the running jobs in cached-key order with their GPUs (parallel lists), kept sorted as
    # jobs start, stop and wake, for the preemptive pass over the sorted pending queue
    ranked_run = cached_running and sorted_pending and discipline == "preemptive"
    rkeys: list[tuple] = []
    rjobs: list[SimJob] = []
    rgpus: list[int] = []
    needs_usage = ranker.needs_usage
    pending_wakes = ranker.pending_wakes
    account_key = getattr(ranker, "account_key", None)
    # per-account queues: the key is (account's standing, then a per-job key that changes only
    # at the job's own wake-ups); each account keeps its waiting (and, preemptive, running)
    # jobs sorted by that per-job key, and a pass merges the accounts' heads by the real key
    grouped = fast and getattr(ranker, "grouped", False) and discipline in ("strict", "firstfit", "preemptive")
    grouped_run = grouped and discipline == "preemptive"
    if grouped:
        sorted_pending = piecewise = cached_running = False
    gp: dict[str, tuple[list, list]] = {}  # account -> (per-job keys, jobs) waiting
    gr: dict[str, tuple[list, list]] = {}  # account -> (per-job keys, jobs) running
    # the per-job keys end with the job id: with unique ids no two keys in a list are equal, so
    # a job put back under its key goes back to the place it had
    unique_keys = grouped_run and len({j.job_id for j in jobs}) == len(jobs)
    n_waiting = [0]
    # usage charged per account at each event (Σ GPUs running × elapsed) instead of per job
    charge_by_account = fast and needs_usage
    acct_gpus: dict[str, int] = {}
    last_refresh = [-INF]
    epoch = [ranker.epoch()]
    # jobs whose keys changed when others finished (Gittins learning a batch at once)
    touched = getattr(ranker, "touched", None)
    woken: dict[int, tuple[float, int]] = {}  # with touched: a running job's last wake-up
    preemptions = 0
    arrive = getattr(ranker, "arrive", None)  # deadline admission at a job's first arrival
    book: LeaseBook | None = None  # the lease discipline's per-account sums and buckets
    if discipline == "lease":
        ranker.restart_s = cost.restart(total)
        if fast and getattr(ranker, "lease_static_pending", False):
            book = LeaseBook(ranker, total, free, per_node, spread)
    ticks = [0, None, -INF]  # (counter, last wake-up time pushed, earliest next decision)

    # placement is a pure function of the free GPUs per node: a width that did not fit stays
    # unplaceable until a job starts or stops (wake-ups and arrivals change nothing there)
    free_ver = [0]
    unplaceable: dict[int, int] = {}  # GPUs -> free_ver at which placing them failed

    def try_place(gpus: int):
        if gpus > free_total or unplaceable.get(gpus) == free_ver[0]:
            return None
        alloc = place(free, gpus, per_node)
        if alloc is None:
            unplaceable[gpus] = free_ver[0]
        return alloc

    def start(sj: SimJob, alloc, now: float) -> None:
        nonlocal free_total
        for i, g in alloc:
            free[i] -= g
        free_ver[0] += 1
        free_total -= sj.gpus
        sj.alloc = alloc
        sj.running = True
        sj.seg_start = now
        sj.charged_to = now
        sj.job.state = JobState.RUNNING
        sj.job.start_time = now
        if sj.first_start is None:
            sj.first_start = now
        sj.queue_s += now - sj.pend_since
        sj.speed = slowdown(model_info, sj.job.name, sj.gpus, len(alloc), per_node) if spread else 1.0
        sj.version += 1
        end = now + sj.remaining / sj.speed
        heapq.heappush(heap, (end, _DONE, sj.seq, sj.version, sj))
        if cached_running:
            sj.static_key, nxt = ranker.key_and_next(sj, now)
        else:
            nxt = ranker.next_change(sj, now)
        if nxt is not None and nxt < end:
            heapq.heappush(heap, (nxt, _WAKE, sj.seq, sj.version, sj))
        running.append(sj)
        if ranked_run:
            r_insert(sj)
        elif grouped_run:
            g_insert(gr, sj, ranker.group_key(sj, now), True)
        if charge_by_account:
            acct_gpus[sj.account] = acct_gpus.get(sj.account, 0) + sj.gpus
        if book is not None:
            book.started(sj)
        qd.append((now, -1))

    def stop(sj: SimJob, now: float, hold: bool = False) -> None:
        """``hold``: the GPUs come back ``release_s`` later (a finished job's)."""
        nonlocal free_total
        if book is not None:
            book.stopped(sj)
        if hold:
            heapq.heappush(releases, (now + release_s, sj.seq, sj.alloc))
        else:
            for i, g in sj.alloc:
                free[i] += g
            free_ver[0] += 1
            free_total += sj.gpus
        ran = now - sj.seg_start
        sj.attained0 += sj.gpus * ran
        sj.executed0 += ran
        sj.remaining -= ran * sj.speed
        sj.running = False
        sj.alloc = ()
        sj.version += 1
        running.remove(sj)
        if ranked_run:
            r_remove(sj)
        if grouped_run:
            g_remove(gr, sj, sj.static_key)
        j = sj.job
        j.state = JobState.PENDING
        j.attained_gpu_s = round(sj.attained0, 6)
        j.executed_s = sj.executed0
        if charge_by_account:
            acct_gpus[sj.account] -= sj.gpus
            ranker.charge(sj.account, sj.gpus * (now - max(sj.charged_to, last_refresh[0])), now)
        elif needs_usage:
            ranker.charge(sj.account, sj.gpus * (now - sj.charged_to), now)

    def preempt(sj: SimJob, now: float) -> None:
        nonlocal preemptions
        ran = now - sj.seg_start
        stop(sj, now)
        penalty = cost.restart(sj.gpus) + cost.lost_work(ran) * sj.speed
        sj.remaining += penalty
        sj.job.duration += penalty
        sj.preemptions += 1
        sj.job.restarts = sj.preemptions
        preemptions += 1
        sj.pend_since = now
        enqueue(sj, now)

    def enqueue(sj: SimJob, now: float) -> None:
        qd.append((now, 1))
        if grouped:
            g_insert(gp, sj, ranker.group_key(sj, now), False)
            n_waiting[0] += 1
        elif sorted_pending:
            insert_pending(sj, ranker.key(sj, now))
        elif book is not None:
            book.enqueue(sj)
        else:
            pending.append(sj)
        if pending_wakes:
            nxt = ranker.next_change(sj, now)
            if nxt is not None:
                heapq.heappush(heap, (nxt, _WAKE, sj.seq, sj.version, sj))

    def r_insert(sj: SimJob) -> None:
        i = bisect.bisect_right(rkeys, sj.static_key)
        rkeys.insert(i, sj.static_key)
        rjobs.insert(i, sj)
        rgpus.insert(i, sj.gpus)

    def r_remove(sj: SimJob) -> None:
        i = bisect.bisect_left(rkeys, sj.static_key)
        while rjobs[i] is not sj:
            i += 1
        del rkeys[i]
        del rjobs[i]
        del rgpus[i]

    def insert_pending(sj: SimJob, k: tuple) -> None:
        i = bisect.bisect_right(pending_keys, k)
        pending_keys.insert(i, k)
        pending.insert(i, sj)
        sj.pend_key = k

    def rekey_some(some: list, now: float) -> None:
        """The keys of ``some`` jobs changed (the ranker's ``touched``): move each waiting one to
        its new place, re-cache and re-wake each running one."""
        for sj in some:
            if sj.running:
                if cached_running:
                    if ranked_run:
                        r_remove(sj)
                    sj.static_key = ranker.key(sj, now)
                    if ranked_run:
                        r_insert(sj)
                nxt = ranker.next_change(sj, now)
                if nxt is not None and nxt < sj.seg_start + sj.remaining / sj.speed:
                    heapq.heappush(heap, (nxt, _WAKE, sj.seq, sj.version, sj))
            elif sorted_pending:
                i = bisect.bisect_left(pending_keys, sj.pend_key)
                while i < len(pending) and pending[i] is not sj and pending_keys[i] == sj.pend_key:
                    i += 1
                if i < len(pending) and pending[i] is sj:
                    del pending_keys[i]
                    del pending[i]
                    insert_pending(sj, ranker.key(sj, now))

    def rekey_pending(sj: SimJob, now: float) -> None:
        """A waiting job's key changed on its own: move it to its new place."""
        i = bisect.bisect_left(pending_keys, sj.pend_key)
        while pending[i] is not sj:
            i += 1
        del pending_keys[i]
        del pending[i]
        insert_pending(sj, ranker.key(sj, now))

    def g_insert(groups: dict, sj: SimJob, k: tuple, is_running: bool) -> None:
        g = groups.get(sj.account)
        if g is None:
            g = groups[sj.account] = ([], [])
        ks, js = g
        i = bisect.bisect_right(ks, k)
        ks.insert(i, k)
        js.insert(i, sj)
        if is_running:
            sj.static_key = k
        else:
            sj.pend_key = k

    def g_remove(groups: dict, sj: SimJob, k: tuple) -> None:
        ks, js = groups[sj.account]
        i = bisect.bisect_left(ks, k)
        while js[i] is not sj:
            i += 1
        del ks[i]
        del js[i]

    # The merge heaps hold (real key, account, index, account's list): the key ends with the
    # job id, and (account, index) is unique, so the list itself is never compared. A pass
    # reads keys through ``ranker.head_keyer`` (valid while the ledger does not change: no
    # pass charges before its last read).
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
        """``g_next`` when the caller takes only jobs of at most ``quota`` GPUs, and its quota
        never grows: the account's list advances past the jobs that need more (each would be
        passed over at its turn), so their keys are never made."""
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

    def pass_grouped_fit(now: float, skip: bool) -> None:
        if free_total == 0 or not n_waiting[0]:
            return
        hk = ranker.head_keyer(now)
        heap: list = []
        g_merge(gp, hk, heap)
        heapq.heapify(heap)
        started = []
        while heap and free_total > 0:
            sj = g_next(heap, hk)
            alloc = try_place(sj.gpus)
            if alloc is None:
                if not skip:
                    break
                continue
            start(sj, alloc, now)
            started.append(sj)
        for sj in started:
            g_remove(gp, sj, sj.pend_key)
        n_waiting[0] -= len(started)

    def pass_grouped_preemptive(now: float) -> None:
        if not n_waiting[0]:
            return
        hk = ranker.head_keyer(now)
        heap: list = []
        g_merge(gp, hk, heap)
        best = min(h[0] for h in heap)  # the best waiting job's key (each account's head)
        tails = [(hk(js[-1]), js) for _, js in gr.values() if js]
        chosen: list[SimJob] = []
        if not tails or best > max(t[0] for t in tails):
            # every running job outranks every waiting one: nothing to preempt, fill free GPUs
            quota = free_total
            heapq.heapify(heap)
            while heap and quota > 0:
                sj = g_next_within(heap, hk, quota)
                if sj.gpus <= quota:
                    quota -= sj.gpus
                    chosen.append(sj)
            if chosen:
                start_grouped(chosen, [], now)
            return
        heapq.heapify(heap)
        chosen, victims = select_grouped(heap, hk, tails)
        if chosen:
            start_grouped(chosen, victims, now)

    def select_grouped(heap: list, hk, tails: list) -> tuple[list[SimJob], list[SimJob]]:
        """The preemptive selection (pending and running jobs in rank order, each taken while
        its GPUs fit in what is left of the cluster, until nothing is left) without walking
        every running job: ``heap`` merges the waiting jobs forward; the running jobs are
        walked backward from the lowest ranked (``tails``: each account's lowest, with its
        key), only as far as the choice needs.

        With ``free_total`` GPUs free and ``C`` GPUs chosen so far, the GPUs left just before
        a job ``x`` are ``free_total + R(x) - C`` while no running job has been skipped, where
        ``R(x)`` counts the running jobs ranked at or below ``x``. The walked ones (the lowest
        ranked, ``w_sum`` GPUs) bound it from below, so a waiting job needing fewer GPUs than
        ``free_total + w_sum - C`` is taken, and every running job above the walked ones fits.
        Otherwise the walk goes on; once it has passed the last waiting job taken (or the
        waiting job in question), the rest is decided exactly over the walked jobs."""
        rheap = [_Rev(k, js, len(js) - 1) for k, js in tails]
        heapq.heapify(rheap)
        walked: list[tuple[tuple, SimJob]] = []  # lowest ranked first
        w_sum = 0
        c_sum = 0
        chosen: list[SimJob] = []
        last = None  # key of the last waiting job taken

        def walk() -> tuple:
            nonlocal w_sum
            top = rheap[0]
            js = top.a
            sj = js[top.i]
            walked.append((top.k, sj))
            w_sum += sj.gpus
            if top.i > 0:
                heapq.heapreplace(rheap, _Rev(hk(js[top.i - 1]), js, top.i - 1))
            else:
                heapq.heappop(rheap)
            return top.k

        exact = False
        while heap:
            pk = heap[0][0]
            # the running jobs between the last job taken and this one must fit: walk until
            # they do, or until every running job below the last one taken is walked
            while free_total + w_sum - c_sum <= 0 and rheap and not (
                    last is not None and walked and walked[-1][0] < last):
                walk()
            if free_total + w_sum - c_sum <= 0 or (walked and walked[-1][0] < pk):
                exact = True
                break
            g = groups_head_gpus(heap)
            while g >= free_total + w_sum - c_sum and rheap:
                if walk() < pk:  # walked past this job: decide it exactly
                    break
            if g >= free_total + w_sum - c_sum or (walked and walked[-1][0] < pk):
                exact = True
                break
            sj = g_next(heap, hk)
            chosen.append(sj)
            c_sum += sj.gpus
            last = pk
        # exactly, from just below the last waiting job taken: the walked jobs there in rank
        # order, merged with the waiting jobs not yet decided
        below = [x for x in reversed(walked) if last is None or last < x[0]]
        quota = free_total + sum(sj.gpus for _, sj in below) - c_sum
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
        return chosen, victims

    def groups_head_gpus(heap: list) -> int:
        _, _, i, js = heap[0]
        return js[i].gpus

    def start_grouped(chosen: list[SimJob], victims: list[SimJob], now: float) -> None:
        # with unique keys a chosen job that does not fit stays where it is (the place it
        # would go back to); otherwise it is taken out first and put back after its equals
        if not unique_keys:
            for sj in chosen:
                g_remove(gp, sj, sj.pend_key)
            n_waiting[0] -= len(chosen)
        victims.sort(key=lambda s: s.seq)
        for sj in victims:
            preempt(sj, now)
        for sj in chosen:
            alloc = try_place(sj.gpus)
            if alloc is not None:
                if unique_keys:
                    g_remove(gp, sj, sj.pend_key)
                    n_waiting[0] -= 1
                start(sj, alloc, now)
            elif not unique_keys:  # back under the key it waits with (changes only at its wake-ups)
                g_insert(gp, sj, sj.pend_key, False)
                n_waiting[0] += 1

    def refresh_usage(now: float) -> None:
        # running work counts as it accrues (the daemon's ledger charges it every cycle)
        if charge_by_account:
            dt = now - last_refresh[0]
            if dt > 0 and dt != INF:
                ranker.charge_running(acct_gpus, dt, now)
            last_refresh[0] = now
            return
        for sj in running:
            if now > sj.charged_to:
                ranker.charge(sj.account, sj.gpus * (now - sj.charged_to), now)
                sj.charged_to = now

    def rekey(now: float) -> None:
        """Every key may have changed (the ranker's epoch moved): re-sort, re-cache, re-wake."""
        if sorted_pending:
            keyed = sorted(((ranker.key(sj, now), sj) for sj in pending), key=lambda x: x[0])
            pending_keys[:] = [k for k, _ in keyed]
            pending[:] = [sj for _, sj in keyed]
            for k, sj in keyed:
                sj.pend_key = k
        for sj in running:
            if cached_running:
                sj.static_key = ranker.key(sj, now)
            nxt = ranker.next_change(sj, now)
            if nxt is not None and nxt < sj.seg_start + sj.remaining / sj.speed:
                heapq.heappush(heap, (nxt, _WAKE, sj.seq, sj.version, sj))
        if ranked_run:
            order = sorted(running, key=by_cached_key)
            rkeys[:] = [sj.static_key for sj in order]
            rjobs[:] = order
            rgpus[:] = [sj.gpus for sj in order]

    def sort_pending(now: float) -> None:
        if account_key is not None:  # the key is (account's key, submit, id): one call per account
            gk = {a: account_key(a, now) for a in {s.account for s in pending}}
            pending.sort(key=lambda s: (gk[s.account], s.job.submit_time, s.job.job_id))
        else:
            pending.sort(key=lambda s: ranker.key(s, now))

    def pass_strict(now: float, skip: bool) -> None:
        if not sorted_pending:  # else kept in key order as jobs arrive, wake and re-key
            sort_pending(now)
        i = 0
        while i < len(pending):
            if free_total == 0:
                break
            sj = pending[i]
            alloc = try_place(sj.gpus)
            if alloc is None:
                if not skip:
                    break
                i += 1
                continue
            del pending[i]
            if sorted_pending:
                del pending_keys[i]
            start(sj, alloc, now)

    def est_end(sj: SimJob) -> float:
        lim = sj.job.time_limit if sj.job.time_limit else sj.duration
        return sj.seg_start + max(0.0, lim - sj.executed0)

    def pass_backfill(now: float) -> None:
        if not sorted_pending:
            sort_pending(now)
        shadow = None
        extra = 0
        i = 0
        while i < len(pending) and free_total > 0:
            sj = pending[i]
            alloc = try_place(sj.gpus)
            if shadow is None:
                if alloc is None:
                    avail = free_total
                    shadow = now
                    for s in sorted(running, key=est_end):
                        if avail >= sj.gpus:
                            break
                        avail += s.gpus
                        shadow = est_end(s)
                    extra = avail - sj.gpus
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
            if sorted_pending:
                del pending_keys[i]
            start(sj, alloc, now)

    def pass_preemptive_sorted(now: float) -> None:
        """Merge the sorted pending queue with the running jobs ranked now; stop when full."""
        if ranked_run:
            pass_preemptive_ranked(now)
            return
        rk = sorted(((ranker.key(sj, now), sj) for sj in running), key=lambda x: x[0])
        quota = total
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
        start_chosen(chosen, [sj for sj in running if sj.seq not in selected_running], now)

    def pass_preemptive_ranked(now: float) -> None:
        """The same merge with the running jobs' cached keys kept sorted (``rkeys``): a run of
        running jobs that rank between two waiting ones and fit together is taken in one step
        (prefix sums of their GPUs), so a pass costs about the number of waiting jobs it looks
        at, not the number running."""
        if not rjobs or pending_keys[0] > rkeys[-1]:
            # every running job outranks every waiting one: nothing to preempt, fill free GPUs
            if free_total == 0:
                return
            quota = free_total
            chosen = []
            for i, sj in enumerate(pending):
                if sj.gpus <= quota:
                    quota -= sj.gpus
                    chosen.append(i)
                    if quota == 0:
                        break
            if chosen:
                start_chosen(chosen, [], now)
            return
        cum = list(accumulate(rgpus))
        quota = total
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
        start_chosen(chosen, victims, now)

    def start_chosen(chosen: list[int], victims: list[SimJob], now: float) -> None:
        """Preempt ``victims`` then place the pending jobs at indexes ``chosen`` in rank order;
        one that cannot be placed stays where it waits (its key is unique: no other moves)."""
        if not victims:  # the indexes stay valid: take the started ones out from the back
            started = []
            for i in chosen:
                sj = pending[i]
                alloc = try_place(sj.gpus)
                if alloc is not None:
                    start(sj, alloc, now)
                    started.append(i)
            for i in reversed(started):
                del pending[i]
                del pending_keys[i]
            return
        chosen_jobs = [pending[i] for i in chosen]
        victims.sort(key=lambda s: s.seq)
        for sj in victims:
            preempt(sj, now)
        for sj in chosen_jobs:
            alloc = try_place(sj.gpus)
            if alloc is not None:
                i = bisect.bisect_left(pending_keys, sj.pend_key)
                while pending[i] is not sj:
                    i += 1
                del pending_keys[i]
                del pending[i]
                start(sj, alloc, now)

    def pass_preemptive(now: float) -> None:
        if not pending:
            return
        if sorted_pending:
            pass_preemptive_sorted(now)
            return
        cands = pending + running
        if cached_running:  # a running job's key is re-read only at its wake-ups
            cands.sort(key=lambda s: s.static_key if s.running else ranker.key(s, now))
        else:
            cands.sort(key=lambda s: ranker.key(s, now))
        quota = total
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
            preempt(sj, now)
        started = set()
        for sj in chosen:
            alloc = try_place(sj.gpus)
            if alloc is not None:
                start(sj, alloc, now)
                started.add(sj.seq)
        if started:
            pending[:] = [s for s in pending if s.seq not in started]

    def fill(order: list[SimJob], now: float) -> None:
        started = set()
        for sj in order:
            if free_total == 0:
                break
            alloc = try_place(sj.gpus)
            if alloc is not None:
                start(sj, alloc, now)
                started.add(sj.seq)
        if started:
            pending[:] = [s for s in pending if s.seq not in started]

    def tick_at(t: float) -> None:
        if t != ticks[1]:
            ticks[0] += 1
            ticks[1] = t
            heapq.heappush(heap, (t, _WAKE, -ticks[0], 0, _TICK))

    def pass_lease(now: float) -> None:
        if not pending:
            return
        if free_total > 0:
            fill(ranker.lease_fill_order(pending, running, total, now), now)
            if not pending:
                return
        if now < ticks[2]:  # decided recently (a daemon decides once per cycle): decide then
            tick_at(ticks[2])
            return
        ticks[2] = now + ranker.decide_every_s
        moves, wake = ranker.lease_moves(pending, running, total, free_total, now, node_free=free, per_node=per_node)
        for victims, need in moves:
            for sj in sorted(victims, key=lambda s: s.seq):
                preempt(sj, now)
            alloc = try_place(need.gpus)
            if alloc is not None:
                pending.remove(need)
                start(need, alloc, now)
        if moves and free_total > 0:
            fill(ranker.lease_fill_order(pending, running, total, now), now)
        if wake is not None:
            tick_at(max(wake, ticks[2]))

    if book is not None:
        book.bind(ranker=ranker, running=running, ticks=ticks, try_place=try_place, start=start,
                  preempt=preempt, tick_at=tick_at, free_left=lambda: free_total)

    def release_until(now: float) -> None:
        nonlocal free_total
        while releases and releases[0][0] <= now:
            _, _, alloc = heapq.heappop(releases)
            for i, g in alloc:
                free[i] += g
                free_total += g
            free_ver[0] += 1

    origin = arrivals[0].submit if arrivals else 0.0

    def off_pass(now: float) -> bool:
        """With ``pass_s``: not a pass time; a wake-up is set at the next one."""
        k = math.ceil((now - origin) / pass_s - 1e-9)
        nxt = origin + k * pass_s
        if nxt - now <= 1e-9:
            return False
        tick_at(nxt)
        return True

    n = len(arrivals)
    ai = 0
    finished: list[SimJob] = []
    # the ranked preemptive pass is a function of the waiting jobs, the free GPUs and where each
    # running job's key falls among the waiting keys (running jobs between two waiting ones
    # all fit when the pass left everything as it was). After a pass that started and
    # preempted nothing (``idle_ver``: the free GPUs' version it saw), an event time with only
    # running jobs' key changes that leave each where it falls changes nothing: no pass.
    idle_ver = [-1]
    while ai < n or heap or releases:
        # a superseded completion or wake-up (the job stopped or started since) is no event:
        # a pass at its time would re-rank on a clock nothing happened at, and with keys that
        # drift in time (fair share) each such pass can preempt, leaving more stale entries
        while heap and heap[0][3] != heap[0][4].version:
            heapq.heappop(heap)
        if ai >= n and not heap and not releases:
            break
        t_arr = arrivals[ai].submit if ai < n else float("inf")
        t_evt = heap[0][0] if heap else float("inf")
        now = min(t_arr, t_evt, releases[0][0] if releases else INF)
        release_until(now)
        done = False
        same = fast and ranked_run and idle_ver[0] == free_ver[0]
        last = None
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
                stop(sj, now, hold=release_s > 0)
                sj.remaining = 0.0
                sj.end_time = now
                sj.job.state = JobState.COMPLETED
                ranker.finished(sj)
                if book is not None:
                    book.finish(sj)
                finished.append(sj)
                done = True
            elif sj.running:
                if touched is not None:
                    # rekey_some may have left a second wake-up for the same time: one is enough
                    if woken.get(sj.seq) == (now, ver):
                        continue
                    woken[sj.seq] = (now, ver)
                if cached_running:
                    if ranked_run:
                        r_remove(sj)
                        old = sj.static_key
                    sj.static_key, nxt = ranker.key_and_next(sj, now)
                    if ranked_run:
                        r_insert(sj)
                        if same and (bisect.bisect_right(pending_keys, old)
                                     != bisect.bisect_right(pending_keys, sj.static_key)):
                            same = False
                else:
                    if grouped_run:
                        g_remove(gr, sj, sj.static_key)
                        g_insert(gr, sj, ranker.group_key(sj, now), True)
                    nxt = ranker.next_change(sj, now)
                end = sj.seg_start + sj.remaining / sj.speed
                if nxt is not None and nxt < end:
                    heapq.heappush(heap, (nxt, _WAKE, sj.seq, sj.version, sj))
            else:  # a waiting job's key changes on its own (starvation guard, deadline boost)
                same = False
                if piecewise:
                    rekey_pending(sj, now)
                elif grouped:
                    g_remove(gp, sj, sj.pend_key)
                    g_insert(gp, sj, ranker.group_key(sj, now), False)
                nxt = ranker.next_change(sj, now)
                if nxt is not None:
                    heapq.heappush(heap, (nxt, _WAKE, sj.seq, sj.version, sj))
        if done:
            ep = ranker.epoch()
            if ep != epoch[0]:
                epoch[0] = ep
                rekey(now)
                if touched is not None:
                    touched()  # all re-keyed already
            elif touched is not None:
                moved = touched()
                if moved:
                    same = False
                    rekey_some(moved, now)
            if on_finish is not None:
                on_finish(now, len(finished))
        while ai < n and arrivals[ai].submit <= now:
            same = False
            sj = arrivals[ai]
            ai += 1
            if arrive is not None:
                arrive(sj, now, total)
            if book is not None:
                book.arrive(sj)
            enqueue(sj, now)
        if needs_usage:
            refresh_usage(now)
        if pass_s and off_pass(now):
            idle_ver[0] = -1  # what happened now is passed over at the next pass time
            continue
        if grouped:
            if grouped_run:
                pass_grouped_preemptive(now)
            else:
                pass_grouped_fit(now, skip=discipline == "firstfit")
        elif ranked_run:
            if same and not done:
                continue
            v = free_ver[0]
            pass_preemptive(now)
            idle_ver[0] = v if free_ver[0] == v else -1
        elif discipline == "preemptive":
            pass_preemptive(now)
        elif book is not None:
            book.lease_pass(now)
        elif discipline == "lease":
            pass_lease(now)
        elif discipline == "backfill":
            pass_backfill(now)
        else:
            pass_strict(now, skip=discipline == "firstfit")
    return ClusterResult(spec, sims, qd, preemptions)


class _Rev:
    """A heap entry ordered by descending key (the lowest-ranked job first); ``a``: the
    account's list of running jobs, ``i``: the job's index there."""

    __slots__ = ("k", "a", "i")

    def __init__(self, k: tuple, a: list, i: int) -> None:
        self.k, self.a, self.i = k, a, i

    def __lt__(self, other: "_Rev") -> bool:
        return other.k < self.k


def fewest_nodes(jobs: list, gpus_per_node: int) -> int:
    """The fewest nodes that fit the largest job (at least one)."""
    return max([1] + [min_nodes(j.num_gpus, gpus_per_node) for j in jobs])


RunFn = Callable[..., ClusterResult]
