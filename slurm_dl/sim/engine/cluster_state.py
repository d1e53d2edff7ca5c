"""The engine's state for one cluster and the moves every discipline shares: start, stop,
preempt, queue, re-key (see :mod:`.loop` for the event loop and the disciplines).

Where GPUs are is the placer's (:class:`~.placement.FlatPlacer` for one node shape and type,
:class:`~.typed.TypedPlacer` for node groups of several types); the engine only asks it to
place a job, to take and give back GPUs, and how fast a job runs where it was placed.
"""

from __future__ import annotations

import bisect
import heapq
import math
from operator import attrgetter
from typing import Any, Callable

from ...core.model import JobState
from .preempt_typed import MOVE_GAIN
from .lease import LeaseBook
from .state import Dispatch, PreemptionCost, SimJob

_DONE, _WAKE = 0, 1
INF = float("inf")
_RUNNING, _PENDING = JobState.RUNNING, JobState.PENDING


class _Tick:
    """A wake-up that belongs to no job (a lease ends): only makes a pass happen."""

    version = 0
    running = False


_TICK = _Tick()
by_cached_key = attrgetter("static_key")


def index_of(keys: list, items: list, key: tuple, item) -> int:
    """Where ``item`` is in ``items``, kept sorted by ``keys`` (parallel), under ``key``."""
    i = bisect.bisect_left(keys, key)
    while items[i] is not item:
        i += 1
    return i


class EngineState:
    """Jobs, queues, free GPUs and the ranker's fast-path flags of one replay."""

    def __init__(
        self,
        jobs: list,
        placer,
        ranker,
        cost: PreemptionCost,
        *,
        fast: bool = True,
        on_finish: Callable[[float, int], None] | None = None,
        dispatch: Dispatch | None = None,
        power=None,
    ) -> None:
        self.placer = placer
        self.power = power  # node power states (.power.PowerModel), or None: always on
        self.typed = not placer.flat  # node groups of several GPU types (TypedPlacer)
        # the aware choice on learnt speeds: told of arrivals and finished runs (typed_learn)
        self.learns = getattr(placer, "learns", False)
        self.fast = fast
        self.total = placer.total
        self.ranker = ranker
        self.cost = cost
        self.on_finish = on_finish
        keep = getattr(ranker, "keep_unresumable", None)
        if keep is not None:  # jobs that cannot resume are never victims (pinned while they run)
            keep(jobs)
        self.sims = [SimJob(i, j) for i, j in enumerate(jobs)]
        placer.prepare(self.sims, ranker)
        self.arrivals = sorted(self.sims, key=lambda s: (s.submit, s.seq))
        self.heap: list[tuple[float, int, int, int, Any]] = []  # SimJob, or _Tick for a wake-up
        self.running: list[SimJob] = []
        self.pending: list[SimJob] = []
        self.pending_keys: list[
            tuple
        ] = []  # for static rankers: keys parallel to ``pending`` (sorted)
        self.qd: list[tuple[float, int]] = []
        self.discipline = discipline = ranker.discipline
        self.release_s = dispatch.release_s if dispatch is not None else 0.0
        self.pass_s = dispatch.pass_s if dispatch is not None else 0.0
        self.releases: list[
            tuple[float, int, tuple]
        ] = []  # (time, seq, allocation) GPUs coming back
        self._flags(ranker, discipline, fast)
        self.preemptions = 0
        self.moves = 0  # of the preemptions, moves to a faster type (fair share on several types)
        cfg = getattr(ranker, "config", None)  # the prioritizer's threshold for moves (0: none)
        self.move_gain = cfg.preemption.move_min_speedup if cfg is not None else MOVE_GAIN
        if getattr(placer, "choice", None) != "aware":
            self.move_gain = 0.0  # moves belong to the aware choice (blind: Slurm's --gpus=N)
        self.waiting_gpus = 0  # GPUs the waiting jobs ask for
        self.arrive = getattr(ranker, "arrive", None)  # deadline admission at a job's first arrival
        self.book: LeaseBook | None = None  # the lease discipline's per-account sums and buckets
        if discipline == "lease":
            ranker.restart_s = cost.restart(self.total)
            if fast and getattr(ranker, "lease_static_pending", False) and placer.by_width:
                self.book = LeaseBook(
                    ranker,
                    self.total,
                    placer.free,
                    placer.per_node,
                    placer.spread,
                    placer.node_view().get("node_sizes"),
                    getattr(placer, "mean_charge", None),
                )
        self.ticks = [0, None, -INF]  # (counter, last wake-up time pushed, earliest next decision)
        if self.book is not None:
            self.book.bind(
                ranker=ranker,
                running=self.running,
                ticks=self.ticks,
                try_place=placer.place,
                start=self.start,
                apply_moves=self.apply_moves,
                decision_due=self.decision_due,
                tick_at=self.tick_at,
                free_left=lambda: placer.free_total,
                upgrade=self.upgrade_behind if self.typed else None,
            )
        self.finished: list[SimJob] = []
        # the ranked preemptive pass is a function of the waiting jobs, the free GPUs and where
        # each running job's key falls among the waiting keys (see Engine.run): after a pass
        # that started and preempted nothing (``idle_ver``: the free GPUs' version it saw), an
        # event time with only such key changes needs no pass
        self.idle_ver = -1

    def _flags(self, ranker, discipline: str, fast: bool) -> None:
        """Which fast paths the ranker allows (see :mod:`slurm_dl.sim.ranking.ranker`)."""
        self.static = ranker.static and discipline != "preemptive"
        # preemptive fast path: pending keys constant while waiting (kept sorted), running keys
        # constant between the ranker's next_change events (cached in ``static_key``); pending
        # keys may also be piecewise constant, changing only at the job's own next_change
        # (starvation promotion, deadline boost): kept sorted and re-inserted at those wake-ups
        self.piecewise = getattr(ranker, "pending_piecewise", False) and discipline != "lease"
        self.sorted_pending = (
            self.static or getattr(ranker, "pending_static", False) or self.piecewise
        )
        self.cached_running = getattr(ranker, "running_key_cached", False)
        # the running jobs in cached-key order with their GPUs (parallel lists), kept sorted as
        # jobs start, stop and wake, for the preemptive pass over the sorted pending queue
        self.ranked_run = self.cached_running and self.sorted_pending and discipline == "preemptive"
        # several GPU types, aware choice: the typed selection (engine_typed), which may skip
        # a pass at an event time the same way as the ranked one
        self.typed_select = (
            discipline == "preemptive" and getattr(self.placer, "choice", None) == "aware"
        )
        self.rkeys: list[tuple] = []
        self.rjobs: list[SimJob] = []
        self.rgpus: list[int] = []
        self.needs_usage = ranker.needs_usage
        self.pending_wakes = ranker.pending_wakes
        self.account_key = getattr(ranker, "account_key", None)
        # per-account queues: the key is (account's standing, then a per-job key that changes
        # only at the job's own wake-ups); each account keeps its waiting (and, preemptive,
        # running) jobs sorted by that per-job key, and a pass merges the accounts' heads
        self.grouped = (
            fast
            and getattr(ranker, "grouped", False)
            and discipline in ("strict", "firstfit", "preemptive")
            and self.placer.flat
        )
        self.grouped_run = self.grouped and discipline == "preemptive"
        if self.grouped:
            self.sorted_pending = self.piecewise = self.cached_running = False
        self.gp: dict[str, tuple[list, list]] = {}  # account -> (per-job keys, jobs) waiting
        self.gr: dict[str, tuple[list, list]] = {}  # account -> (per-job keys, jobs) running
        # the per-job keys end with the job id: with unique ids no two keys in a list are
        # equal, so a job put back under its key goes back to the place it had
        self.unique_keys = self.grouped_run and len({s.job.job_id for s in self.sims}) == len(
            self.sims
        )
        self.n_waiting = 0
        # usage charged per account at each event (Σ GPUs running × elapsed) instead of per job
        self.charge_by_account = fast and self.needs_usage
        self.acct_gpus: dict[str, float] = {}
        self.last_refresh = -INF
        self.epoch = ranker.epoch()
        # jobs whose keys changed when others finished (Gittins learning a batch at once)
        self.touched = getattr(ranker, "touched", None)
        self.woken: dict[int, tuple[float, int]] = {}  # with touched: a running job's last wake-up

    # --- GPUs -------------------------------------------------------------------------------
    @property
    def free_total(self) -> int:
        return self.placer.free_total

    def try_place(self, sj: SimJob):
        return self.placer.place(sj)

    # --- a job starts and stops -------------------------------------------------------------
    def start(self, sj: SimJob, alloc, now: float) -> None:
        placer = self.placer
        placer.take(alloc, sj)
        sj.alloc = alloc
        sj.running = True
        self.waiting_gpus -= sj.gpus
        sj.seg_start = now
        sj.charged_to = now
        j = sj.job
        j.state = _RUNNING
        j.start_time = now
        if sj.first_start is None:
            sj.first_start = now
        sj.queue_s += now - sj.pend_since
        sj.speed = placer.speed(sj, alloc) if placer.varied else 1.0
        if self.power is not None:
            self.power.delay(sj, alloc, now)  # its nodes' boot, as more run time
        sj.version += 1
        end = now + sj.remaining / sj.speed
        heapq.heappush(self.heap, (end, _DONE, sj.seq, sj.version, sj))
        ranker = self.ranker
        if self.cached_running:
            sj.static_key, nxt = ranker.key_and_next(sj, now)
        else:
            nxt = ranker.next_change(sj, now)
        if nxt is not None and nxt < end:
            heapq.heappush(self.heap, (nxt, _WAKE, sj.seq, sj.version, sj))
        self.running.append(sj)
        if self.ranked_run:
            self.r_insert(sj)
        elif self.grouped_run:
            self.g_insert(self.gr, sj, ranker.group_key(sj, now), True)
        if self.charge_by_account:
            self.acct_gpus[sj.account] = self.acct_gpus.get(sj.account, 0) + sj.width
        if self.book is not None:
            self.book.started(sj)
        self.qd.append((now, -1))

    def stop(self, sj: SimJob, now: float, hold: bool = False) -> None:
        """``hold``: the GPUs come back ``release_s`` later (a finished job's)."""
        if self.book is not None:
            self.book.stopped(sj)
        ran = now - sj.seg_start
        if self.typed:
            self.placer.ran(sj, ran)
        if hold:
            heapq.heappush(self.releases, (now + self.release_s, sj.seq, sj.alloc))
        else:
            self.placer.give(sj.alloc)
        sj.attained0 += sj.gpus * ran
        sj.executed0 += ran
        sj.served0 += ran * sj.charge
        sj.remaining -= ran * sj.speed
        if self.power is not None:
            self.power.stopped(sj, now)
        sj.running = False
        sj.alloc = ()
        sj.version += 1
        self.running.remove(sj)
        if self.ranked_run:
            self.r_remove(sj)
        if self.grouped_run:
            self.g_remove(self.gr, sj, sj.static_key)
        j = sj.job
        j.state = _PENDING
        if not self.typed:
            j.attained_gpu_s = round(sj.attained0, 6)
            j.executed_s = sj.executed0
        else:  # the policy's view: service charged at the type's speed (ranker.use_charges)
            j.attained_gpu_s = round(sj.gpus * sj.served0, 6)
            j.executed_s = sj.executed0
            j.norm_executed_s = sj.served0
        if self.charge_by_account:
            self.acct_gpus[sj.account] -= sj.width
            self.ranker.charge(
                sj.account, sj.width * (now - max(sj.charged_to, self.last_refresh)), now
            )
        elif self.needs_usage:
            self.ranker.charge(sj.account, sj.width * (now - sj.charged_to), now)

    def preempt(self, sj: SimJob, now: float) -> None:
        ran = now - sj.seg_start
        self.stop(sj, now)
        cost = self.cost
        penalty = cost.restart(sj.gpus) + cost.lost_work(ran) * sj.speed
        sj.remaining += penalty
        sj.job.duration += penalty
        sj.preemptions += 1
        sj.job.restarts = sj.preemptions
        self.preemptions += 1
        sj.pend_since = now
        self.enqueue(sj, now)

    def enqueue(self, sj: SimJob, now: float) -> None:
        self.qd.append((now, 1))
        self.waiting_gpus += sj.gpus
        if self.grouped:
            self.g_insert(self.gp, sj, self.ranker.group_key(sj, now), False)
            self.n_waiting += 1
        elif self.sorted_pending:
            self.insert_pending(sj, self.ranker.key(sj, now))
        elif self.book is not None:
            self.book.enqueue(sj)
        else:
            self.pending.append(sj)
        if self.pending_wakes:
            nxt = self.ranker.next_change(sj, now)
            if nxt is not None:
                heapq.heappush(self.heap, (nxt, _WAKE, sj.seq, sj.version, sj))

    def finish(self, sj: SimJob, now: float) -> None:
        """``sj``'s work is done at ``now``."""
        self.stop(sj, now, hold=self.release_s > 0)
        sj.remaining = 0.0
        sj.end_time = now
        sj.job.state = JobState.COMPLETED
        if self.learns:
            self.placer.finished(sj, now)
        self.ranker.finished(sj)
        if self.book is not None:
            self.book.finish(sj)
        self.finished.append(sj)

    # --- the sorted lists ---------------------------------------------------------------------
    def r_insert(self, sj: SimJob) -> None:
        i = bisect.bisect_right(self.rkeys, sj.static_key)
        self.rkeys.insert(i, sj.static_key)
        self.rjobs.insert(i, sj)
        self.rgpus.insert(i, sj.gpus)

    def r_remove(self, sj: SimJob) -> None:
        i = index_of(self.rkeys, self.rjobs, sj.static_key, sj)
        del self.rkeys[i]
        del self.rjobs[i]
        del self.rgpus[i]

    def insert_pending(self, sj: SimJob, k: tuple) -> None:
        i = bisect.bisect_right(self.pending_keys, k)
        self.pending_keys.insert(i, k)
        self.pending.insert(i, sj)
        sj.pend_key = k

    def take_pending(self, sj: SimJob) -> None:
        """Take waiting ``sj`` out of the sorted queue (found by its key)."""
        i = index_of(self.pending_keys, self.pending, sj.pend_key, sj)
        del self.pending_keys[i]
        del self.pending[i]

    def g_insert(self, groups: dict, sj: SimJob, k: tuple, is_running: bool) -> None:
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

    @staticmethod
    def g_remove(groups: dict, sj: SimJob, k: tuple) -> None:
        ks, js = groups[sj.account]
        i = index_of(ks, js, k, sj)
        del ks[i]
        del js[i]

    # --- keys that change ------------------------------------------------------------------
    def push_wake(self, sj: SimJob, nxt: float | None) -> None:
        """A wake-up for running ``sj`` at ``nxt`` when that comes before its end."""
        if nxt is not None and nxt < sj.seg_start + sj.remaining / sj.speed:
            heapq.heappush(self.heap, (nxt, _WAKE, sj.seq, sj.version, sj))

    def rekey_some(self, some: list, now: float) -> None:
        """The keys of ``some`` jobs changed (the ranker's ``touched``): move each waiting one
        to its new place, re-cache and re-wake each running one."""
        ranker = self.ranker
        pending, pending_keys = self.pending, self.pending_keys
        for sj in some:
            if sj.running:
                if self.cached_running:
                    if self.ranked_run:
                        self.r_remove(sj)
                    sj.static_key = ranker.key(sj, now)
                    if self.ranked_run:
                        self.r_insert(sj)
                self.push_wake(sj, ranker.next_change(sj, now))
            elif self.sorted_pending:
                i = bisect.bisect_left(pending_keys, sj.pend_key)
                while i < len(pending) and pending[i] is not sj and pending_keys[i] == sj.pend_key:
                    i += 1
                if i < len(pending) and pending[i] is sj:
                    del pending_keys[i]
                    del pending[i]
                    self.insert_pending(sj, ranker.key(sj, now))

    def rekey_pending(self, sj: SimJob, now: float) -> None:
        """A waiting job's key changed on its own: move it to its new place."""
        self.take_pending(sj)
        self.insert_pending(sj, self.ranker.key(sj, now))

    def rekey(self, now: float) -> None:
        """Every key may have changed (the ranker's epoch moved): re-sort, re-cache, re-wake."""
        ranker = self.ranker
        if self.sorted_pending:
            keyed = sorted(((ranker.key(sj, now), sj) for sj in self.pending), key=lambda x: x[0])
            self.pending_keys[:] = [k for k, _ in keyed]
            self.pending[:] = [sj for _, sj in keyed]
            for k, sj in keyed:
                sj.pend_key = k
        for sj in self.running:
            if self.cached_running:
                sj.static_key = ranker.key(sj, now)
            self.push_wake(sj, ranker.next_change(sj, now))
        if self.ranked_run:
            order = sorted(self.running, key=by_cached_key)
            self.rkeys[:] = [sj.static_key for sj in order]
            self.rjobs[:] = order
            self.rgpus[:] = [sj.gpus for sj in order]

    def sort_pending(self, now: float) -> None:
        ranker = self.ranker
        if (
            self.account_key is not None
        ):  # the key is (account's key, submit, id): one call per account
            gk = {a: self.account_key(a, now) for a in {s.account for s in self.pending}}
            self.pending.sort(key=lambda s: (gk[s.account], s.job.submit_time, s.job.job_id))
        else:
            self.pending.sort(key=lambda s: ranker.key(s, now))

    def refresh_usage(self, now: float) -> None:
        """Running work counts as it accrues (the daemon's ledger charges it every cycle)."""
        ranker = self.ranker
        if self.charge_by_account:
            dt = now - self.last_refresh
            if dt > 0 and dt != INF:
                ranker.charge_running(self.acct_gpus, dt, now)
            self.last_refresh = now
            return
        for sj in self.running:
            if now > sj.charged_to:
                ranker.charge(sj.account, sj.width * (now - sj.charged_to), now)
                sj.charged_to = now

    # --- time -----------------------------------------------------------------------------
    def tick_at(self, t: float) -> None:
        ticks = self.ticks
        if t != ticks[1]:
            ticks[0] += 1
            ticks[1] = t
            heapq.heappush(self.heap, (t, _WAKE, -ticks[0], 0, _TICK))

    def release_until(self, now: float) -> None:
        releases = self.releases
        while releases and releases[0][0] <= now:
            _, _, alloc = heapq.heappop(releases)
            self.placer.give(alloc)

    def off_pass(self, now: float, origin: float) -> bool:
        """With ``pass_s``: not a pass time; a wake-up is set at the next one."""
        k = math.ceil((now - origin) / self.pass_s - 1e-9)
        nxt = origin + k * self.pass_s
        if nxt - now <= 1e-9:
            return False
        self.tick_at(nxt)
        return True
