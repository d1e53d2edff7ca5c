"""The engine's bookkeeping for the ``lease`` discipline (fair share with GPU leases), so that an
event costs about the number of accounts, not the number of waiting jobs.

The lease pass needs, at every event with free GPUs, the waiting jobs in the policy's fill
order — LAS queue, then the account's tier (below its fair share, worst finish-time fairness
estimate first), then the LAS key — and, at each decision, the accounts' standings
(:func:`slurm_dl.core.fairness.standings`). Both used to be rebuilt from every waiting and
running job at every event. :class:`LeaseBook` keeps them as the jobs move instead:

* per account, the sums the standings are made of: GPUs held, GPUs asked (demand), jobs in
  the system and the sum of their submit times (time in the system is ``n × now − Σ submit``),
  and the floored run time (``max(executed, rho_floor_s)``): constant for a waiting job, for a
  running job ``rho_floor_s`` until it passes the floor and ``executed0 − seg_start + now``
  after (a heap of those crossing times);
* the waiting jobs per account and GPU count, each list sorted by the job's LAS key, which is
  constant while it waits (no starvation guard; the ranker says so with
  ``lease_static_pending``): the decision walks these lists
  (:class:`slurm_dl.core.waiting.WaitingJobs`) instead of sorting the queue.

A fill then looks only at widths that can be placed now (a width that cannot be placed stays
unplaceable while GPUs are only taken, so the jobs of that width would all be skipped) and
merges the list heads in fill order, stopping when the cluster is full. It starts the same
jobs in the same order as sorting every waiting job and trying each; the standings are the same
up to the rounding of the time-in-system and run-time sums (kept as running sums instead of
summed afresh).
"""

from __future__ import annotations

import bisect
import heapq
from types import SimpleNamespace
from typing import Callable

from ...core.fairness import EPS, INF, Standing, _may_yield, entitled, water_fill
from ...core.waiting import WaitingJobs
from .state import SimJob


class LeaseBook:
    def __init__(
        self,
        ranker,
        total: int,
        free: list[int],
        per_node: int,
        spread: bool,
        node_sizes: list[int] | None = None,
        held_unit: float | None = None,
    ) -> None:
        settings = ranker.policy.settings
        self.floor = settings.rho_floor_s
        self.share = settings.share
        self.within = ranker._within
        self.total = total
        self.free = free  # the engine's free GPUs per node (read only)
        self.per_node = per_node
        self.spread = spread
        self.node_sizes = node_sizes  # each node's GPUs where they differ (node groups)
        # GPU types: GPUs held count at type speed over the mean (see ranker._held_at_speed),
        # kept in thousandths
        self.held_unit = held_unit
        # account -> [jobs, Σ submit, demand, held, Σ floored run of waiting jobs,
        #             running jobs below the floor, running jobs past it, Σ (executed0 − seg_start)]
        self.rows: dict[str, list] = {}
        self.cross: list[tuple[float, int, int, SimJob]] = []  # (passes the floor at, seq, version)
        self.past: dict[
            int, float
        ] = {}  # seq -> executed0 − seg_start of running jobs past the floor
        self.pending: dict[int, SimJob] = {}  # job id -> waiting job, in the order they queued
        # account -> {GPUs: [(LAS key, model Job)] sorted}; counts of waiting jobs per width
        self.queues: dict[str, dict[int, list]] = {}
        self.widths: dict[int, int] = {}
        self._demand_ver = 0  # changes with any account's demand (arrivals, finishes)
        self._fair_of: tuple = (-1, {}, {})
        # per running job id: the SimJob, when it may yield (ranker.yield_from), its allocation
        self.running: dict[int, SimJob] = {}
        self.yields: dict[int, float] = {}
        self.allocs: dict[int, tuple] = {}
        self.yield_from = ranker.yield_from
        # every waiting and running job's within-account key (job id -> key): a waiting job's
        # is constant, a running job's is re-read when its attained service nears the next
        # LAS threshold (a heap of those times: (time, seq, version, SimJob))
        self.keys: dict[int, tuple] = {}
        self.checks: list[tuple[float, int, int, SimJob]] = []
        self.run_key = ranker.lease_run_key
        # per account, its running jobs in the within-account order: sort keys (key, job id)
        # and the model Jobs, parallel lists (what the decision walks for victims)
        self.ranked_keys: dict[str, list[tuple]] = {}
        self.ranked: dict[str, list] = {}
        self.key_check = ranker.lease_key_check
        # per account, a stamp that moves whenever its ranked running jobs change (never
        # repeats), and the decision's "may yield" answer kept while it holds (see may_yield)
        self.rank_ver: dict[str, int] = {}
        self._rank_tick = 0
        self._yield_memo: dict[str, tuple] = {}

    def bind(self, **ops) -> None:
        """The engine's state and operations :meth:`lease_pass` uses: ``ranker``, ``running``,
        ``ticks`` (the engine's decision clock), ``try_place``, ``start``, ``apply_moves``,
        ``decision_due``, ``tick_at``, ``free_left`` (GPUs free now) and ``upgrade`` (on several GPU
        types: moves of running jobs to faster free types before a fill, else ``None``)."""
        self.ops = SimpleNamespace(**ops)

    def lease_pass(self, now: float) -> None:
        """The engine's ``lease`` pass from the book's sums and lists: fill free GPUs, then (at
        most once per ``decide_every_s``) the fair-share decision's moves, then fill again."""
        o = self.ops
        waiting = self.pending
        if not waiting:
            return
        if o.free_left() > 0:
            if o.upgrade is not None:
                o.upgrade(now, self.entitled_rho(now))
            self.fill(now, o.free_left(), o.try_place, o.start, o.free_left)
            if not waiting:
                return
        if not o.decision_due(now):
            return
        self.refresh_keys(now)
        moves, wake = o.ranker.lease_moves(
            self.waiting(),
            o.running,
            self.total,
            o.free_left(),
            now,
            standing=self.standings(now),
            node_free=self.free,
            per_node=self.per_node,
            node_sizes=self.node_sizes,
            waiting=waiting,
            running_by_id=self.running,
            yields=self.yields,
            allocs=self.allocs,
            keys=self.keys,
            ranked=self.ranked,
            may_yield=self.may_yield,
        )
        o.apply_moves(moves, now)
        if moves and o.free_left() > 0:
            self.fill(now, o.free_left(), o.try_place, o.start, o.free_left)
        if wake is not None:
            o.tick_at(max(wake, o.ticks[2]))

    # --- jobs moving ----------------------------------------------------------------------
    def _row(self, account: str) -> list:
        row = self.rows.get(account)
        if row is None:
            row = self.rows[account] = [0, 0.0, 0, 0, 0.0, 0, 0, 0.0]
        return row

    def arrive(self, sj: SimJob) -> None:
        self._demand_ver += 1
        row = self._row(sj.account)
        row[0] += 1
        row[1] += sj.job.submit_time
        row[2] += sj.gpus

    def finish(self, sj: SimJob) -> None:
        self._demand_ver += 1
        row = self.rows[sj.account]
        row[0] -= 1
        row[1] -= sj.job.submit_time
        row[2] -= sj.gpus
        if row[0] == 0:
            del self.rows[sj.account]

    def enqueue(self, sj: SimJob) -> None:
        e = sj.executed0
        self.rows[sj.account][4] += e if e > self.floor else self.floor
        self.pending[sj.job.job_id] = sj
        k = self.within(sj.job)
        sj.pend_key = k
        self.keys[sj.job.job_id] = k
        by = self.queues.get(sj.account)
        if by is None:
            by = self.queues[sj.account] = {}
        lst = by.get(sj.gpus)
        if lst is None:
            by[sj.gpus] = [(k, sj.job)]
        elif k > lst[-1][0]:
            lst.append((k, sj.job))
        else:
            lst.insert(bisect.bisect_right(lst, k, key=_first), (k, sj.job))
        self.widths[sj.gpus] = self.widths.get(sj.gpus, 0) + 1

    def started(self, sj: SimJob) -> None:
        """``sj`` went from waiting to running (the engine has set ``seg_start``, ``version``)."""
        jid = sj.job.job_id
        del self.pending[jid]
        self.running[jid] = sj
        self.yields[jid] = self.yield_from(sj)
        self.allocs[jid] = sj.alloc
        self.keys[jid] = k = self.run_key(sj, sj.seg_start)
        self._rank(sj, k)
        heapq.heappush(self.checks, (self.key_check(sj), sj.seq, sj.version, sj))
        by = self.queues[sj.account]
        lst = by[sj.gpus]
        if lst[0][1] is sj.job:
            del lst[0]
        else:
            del lst[bisect.bisect_left(lst, sj.pend_key, key=_first)]
        if not lst:
            del by[sj.gpus]
            if not by:
                del self.queues[sj.account]
        self.widths[sj.gpus] -= 1
        row = self.rows[sj.account]
        e = sj.executed0
        row[4] -= e if e > self.floor else self.floor
        row[3] += sj.gpus if self.held_unit is None else held_milli(sj, self.held_unit)
        if e > self.floor:
            self.past[sj.seq] = base = e - sj.seg_start
            row[6] += 1
            row[7] += base
        else:
            row[5] += 1
            heapq.heappush(self.cross, (sj.seg_start + self.floor - e, sj.seq, sj.version, sj))

    def stopped(self, sj: SimJob) -> None:
        """``sj`` stops running (called before the engine updates its figures)."""
        jid = sj.job.job_id
        self._unrank(sj, self.keys[jid])
        del self.running[jid], self.yields[jid], self.allocs[jid], self.keys[jid]
        row = self.rows[sj.account]
        row[3] -= sj.gpus if self.held_unit is None else held_milli(sj, self.held_unit)
        base = self.past.pop(sj.seq, None)
        if base is None:
            row[5] -= 1  # its crossing entry goes stale with the job's version
        else:
            row[6] -= 1
            row[7] -= base
            if row[6] == 0:
                row[7] = 0.0

    # --- what the decision reads ----------------------------------------------------------
    def refresh_keys(self, now: float) -> None:
        """Bring the running jobs' keys that may have changed by ``now`` up to date."""
        checks = self.checks
        again = []
        while checks and checks[0][0] <= now:
            _, seq, ver, sj = heapq.heappop(checks)
            if ver != sj.version:
                continue
            jid = sj.job.job_id
            k = self.run_key(sj, now)
            if k != self.keys[jid]:
                self._unrank(sj, self.keys[jid])
                self.keys[jid] = k
                self._rank(sj, k)
            again.append((self.key_check(sj), seq, ver, sj))
        for c in again:  # a key still the same (just below the threshold): checked next time
            heapq.heappush(checks, c)

    def may_yield(self, a: str, js: list, yields: dict, now: float) -> tuple:
        """What the decision's ``_may_yield`` gives for account ``a``'s ranked running jobs
        ``js``, kept while they stay the same and ``now`` is before the first lease end it
        returned (less the decision's tolerance): until then every job's test reads the same."""
        ver = self.rank_ver.get(a)
        got = self._yield_memo.get(a)
        if got is not None and got[0] == ver and now < got[1]:
            return got[2]
        out = _may_yield(js, yields, now)
        self._yield_memo[a] = (ver, INF if out[2] is None else out[2] - EPS, out)
        return out

    def _rank(self, sj: SimJob, k: tuple) -> None:
        a = sj.account
        self._rank_tick += 1
        self.rank_ver[a] = self._rank_tick
        ks = self.ranked_keys.get(a)
        if ks is None:
            ks, js = self.ranked_keys[a], self.ranked[a] = [], []
        else:
            js = self.ranked[a]
        e = (k, sj.job.job_id)
        i = bisect.bisect_right(ks, e)
        ks.insert(i, e)
        js.insert(i, sj.job)

    def _unrank(self, sj: SimJob, k: tuple) -> None:
        a = sj.account
        self._rank_tick += 1
        self.rank_ver[a] = self._rank_tick
        ks, js = self.ranked_keys[a], self.ranked[a]
        i = bisect.bisect_left(ks, (k, sj.job.job_id))
        del ks[i], js[i]
        if not ks:
            del self.ranked_keys[a], self.ranked[a]

    def standings(self, now: float) -> dict[str, Standing]:
        """What :func:`slurm_dl.core.fairness.standings` gives for the jobs in the system now."""
        self._advance(now)
        floor = self.floor
        weights, fair = self._fair()
        out = {}
        for a in sorted(weights):
            n, sub, dem, held, pran, low, high, hbase = self.rows[a]
            if self.held_unit is not None:
                held /= 1000
            waited = n * now - sub
            ran = pran + low * floor + (high * now + hbase if high else 0.0)
            out[a] = Standing(a, weights[a], held, dem, fair[a], max(1.0, waited / ran))
        return out

    def tiers(self, now: float) -> dict[str, tuple]:
        """Per account, its tier in the fill order from its standing now (see :meth:`fill`):
        the same figures as :meth:`standings` without building them."""
        self._advance(now)
        floor = self.floor
        _, fair = self._fair()
        out = {}
        for a, (n, sub, dem, held, pran, low, high, hbase) in self.rows.items():
            if self.held_unit is not None:
                held /= 1000
            if held < fair[a]:
                ran = pran + low * floor + (high * now + hbase if high else 0.0)
                out[a] = (0, -max(1.0, (n * now - sub) / ran))
            else:
                out[a] = (1, 0.0)
        return out

    def entitled_rho(self, now: float) -> dict[str, float]:
        """Per account that may move its running jobs to faster types (below its fair share,
        or asking no more than it: a share that holds all it asks), its finish-time fairness
        estimate now (see :meth:`standings`)."""
        return {a: s.rho for a, s in self.standings(now).items() if entitled(s)}

    def _fair(self) -> tuple[dict, dict]:
        """(weights, water-filled fair shares) per account; they change only with the demand."""
        if self._fair_of[0] != self._demand_ver:
            demand = {a: r[2] for a, r in self.rows.items()}
            weights = {a: self.share(a) for a in demand}
            self._fair_of = (self._demand_ver, weights, water_fill(demand, weights, self.total))
        return self._fair_of[1], self._fair_of[2]

    def _advance(self, now: float) -> None:
        """Move the running jobs that passed the run-time floor before ``now`` to the sums of
        those past it."""
        cross = self.cross
        while cross and cross[0][0] < now:
            _, seq, ver, sj = heapq.heappop(cross)
            if ver != sj.version:
                continue
            e = sj.executed0 + (now - sj.seg_start)
            if not e > self.floor:  # rounding: not past it yet after all
                heapq.heappush(cross, (now, seq, ver, sj))
                break
            row = self.rows[sj.account]
            self.past[seq] = base = sj.executed0 - sj.seg_start
            row[5] -= 1
            row[6] += 1
            row[7] += base

    def waiting(self) -> dict[str, WaitingJobs]:
        """Per account, its waiting jobs with GPUs (what the decision walks)."""
        out = {}
        for a, by in self.queues.items():
            lists = {w: lst for w, lst in by.items() if w > 0}
            if lists:
                out[a] = WaitingJobs(lists)
        return out

    def placeable(self, free_total: int) -> list[int]:
        """The widths of waiting jobs that the placement rule can place now."""
        free, g_node = self.free, self.per_node
        out = []
        mx = whole = rest = None
        for w, c in self.widths.items():
            if not c or w > free_total:
                continue
            if self.spread:
                out.append(w)
                continue
            if mx is None:
                mx = max(free)
                whole = free.count(g_node)
            if w <= g_node:
                if mx >= w:
                    out.append(w)
                continue
            k, r = divmod(w, g_node)
            if whole < k:
                continue
            if r and whole == k:
                if rest is None:
                    rest = max((f for f in free if f < g_node), default=-1)
                if rest < r:
                    continue
            out.append(w)
        return out

    def fill(
        self,
        now: float,
        free_total: int,
        try_place: Callable,
        start: Callable,
        free_left: Callable[[], int],
    ) -> None:
        """Start waiting jobs in fill order while they place, until the cluster is full."""
        widths = self.placeable(free_total)
        if not widths:
            return
        tier = self.tiers(now)
        # the fill order is (LAS queue, account's tier, LAS key): each list is in that order
        lists, tiers = [], []
        for a, by in self.queues.items():
            for w in widths:
                lst = by.get(w)
                if lst:
                    lists.append(lst)
                    tiers.append(tier[a])
        heap = [(lst[0][0][0], tiers[i], lst[0][0], i) for i, lst in enumerate(lists)]
        heapq.heapify(heap)
        dead: set[int] = set()
        pending = self.pending
        while heap:
            i = heap[0][3]
            lst = lists[i]
            job = lst[0][1]
            if job.num_gpus in dead:
                heapq.heappop(heap)
                continue
            sj = pending[job.job_id]
            alloc = try_place(sj)
            if alloc is None:
                dead.add(job.num_gpus)
                heapq.heappop(heap)
                continue
            start(sj, alloc, now)  # takes it off ``lst`` (the head)
            if free_left() == 0:
                return
            if lst:
                k = lst[0][0]
                heapq.heapreplace(heap, (k[0], tiers[i], k, i))
            else:
                heapq.heappop(heap)


def held_milli(sj: SimJob, unit: float) -> int:
    """GPU types: the GPUs ``sj`` holds at its type's speed over ``unit`` (the mean), in
    thousandths (whole numbers add up exactly in any order)."""
    return round(1000 * sj.width / unit)


def _first(entry: tuple) -> tuple:
    return entry[0]
