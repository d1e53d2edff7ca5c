"""The prioritizer's Prometheus metrics: one object the loop feeds after every cycle.

Series (all prefixed ``slurm_dl_prioritizer_``):

- ``cycles_total{outcome}``: ok, degraded (some Slurm updates failed), failed (every update
  the cycle tried failed, or it stopped: Slurm command or database errors), slurm_unreachable;
- ``cycle_duration_seconds`` (histogram) and ``cycle_phase_seconds{phase}`` of the last cycle
  (snapshot, score, push, preempt, explain, store, total); ``ledger_save_seconds`` (histogram)
  is the store's transaction alone;
- ``last_success_timestamp_seconds``: wall clock of the last cycle that completed and was not
  failed (alert on its age);
- ``jobs{state,class}``: pending and running jobs the last cycle saw;
- ``site_factor_pushes_total`` (jobs) and ``site_factor_push_calls_total`` (Slurm calls);
- ``preemptions_total{outcome,reason}``: signalled, requeued, and how open ones closed otherwise
  (finished: the victim ended; abandoned: the waiting job started or left; refused: Slurm
  refused the signal or requeue), by reason (``priority``: a higher-scored job waits; ``idle_gpus``: the victim's GPUs sat idle);
  a victim let go (abandoned) that requeues itself later is counted again as requeued-self;
- ``lost_work_total{account}``: preemptions whose requeue came while the victim still ran, before
  its checkpoint had finished: the work since its last checkpoint was lost (the next wait for
  that job is longer, up to ``max_checkpoint_wait_seconds``);
- ``account_usage_gpu_seconds{account}`` (decayed, as fair share sees it),
  ``account_usage_fraction{account}`` and ``account_share_fraction{account}`` (what it is
  entitled to): an account whose usage fraction stays above its share fraction gets less;
- ``step_errors_total``: SiteFactor or preemption steps Slurm refused while the cycle went on;
- ``updates_refused_total{action}``: changes Slurm refused for lack of rights (site_factor,
  partition, features, preemption): the daemon's user lacks operator rights, or the filter
  does not trust it (alert on any);
- ``cycle``: the cycle number saved in the store;
- ``active``: 1 while this instance runs cycles against slurmctld (its last one, whatever its
  outcome, no older than doctor's bound: 4 intervals, at least 20 s), else 0. Only one
  prioritizer may act on a cluster: a rule counting the instances at 1 catches a second one;
- ``telemetry_sample_age_seconds{node}``: the age of each node's newest gpu-agent sample at the
  last cycle; ``telemetry_stale_nodes`` and ``telemetry_fresh_nodes``: nodes whose newest
  sample is older, or not, than ``telemetry_stale_after_seconds`` (what the prioritizer
  accepts; 0 without telemetry). With telemetry on and no fresh node, idle detection is off;
- ``python_allocated_blocks``, ``malloc_used_bytes``, ``malloc_free_bytes``,
  ``sqlite_memory_bytes``: where the daemon's memory sits, read when scraped (a leak grows
  the blocks or the heap in use; a heap that keeps freed memory grows only the free part);
  the C library's and SQLite's figures are absent where the platform has none.
"""

from __future__ import annotations

import time
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from slurm_dl.core.config import PrioritizerConfig
from slurm_dl.core.doctor import stale_after
from slurm_dl.core.idle.freshness import Freshness
from slurm_dl.daemon import process_memory

from .cycle import CycleReport, Prioritizer

PREFIX = "slurm_dl_prioritizer_"
_CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
VICTIMS_KEPT = 10_000
"""Planned victims whose reason is remembered until their preemption closes; a victim planned
and never signalled would otherwise stay for the daemon's life."""
_SAVE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def preemption_reason(text: str) -> str:
    """A small fixed label from a preemption's reason text."""
    return "idle_gpus" if "sit idle" in text else "priority"


class PrioritizerMetrics:
    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        interval_s: float | None = None,
    ) -> None:
        """``interval_s``: the daemon's ``[prioritizer] interval_seconds`` (None: its default),
        which bounds how long after its last cycle an instance still counts as active."""
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        if interval_s is None:
            interval_s = PrioritizerConfig().interval_seconds
        self.active_for_s = stale_after(interval_s)
        self._ran_at: float | None = None  # wall clock of the last cycle that reached Slurm
        r, p = self.registry, PREFIX
        self.cycles = Counter(p + "cycles", "Cycles run, by outcome", ["outcome"], registry=r)
        self.duration = Histogram(
            p + "cycle_duration_seconds",
            "Duration of a completed cycle",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.phase = Gauge(
            p + "cycle_phase_seconds",
            "Seconds each phase of the last cycle took",
            ["phase"],
            registry=r,
        )
        self.save = Histogram(
            p + "ledger_save_seconds",
            "Seconds the store's per-cycle transaction took",
            buckets=_SAVE_BUCKETS,
            registry=r,
        )
        self.last_success = Gauge(
            p + "last_success_timestamp_seconds", "Unix time the last cycle completed", registry=r
        )
        self.started = Gauge(
            p + "start_timestamp_seconds", "Unix time the daemon started", registry=r
        )
        self.cycle_no = Gauge(p + "cycle", "Cycle number of the last completed cycle", registry=r)
        self.jobs = Gauge(
            p + "jobs",
            "Jobs the last cycle saw, by state and class",
            ["state", "class"],
            registry=r,
        )
        self.pushes = Counter(p + "site_factor_pushes", "Jobs whose SiteFactor was set", registry=r)
        self.push_calls = Counter(
            p + "site_factor_push_calls", "Slurm calls that set SiteFactor", registry=r
        )
        self.step_errors = Counter(
            p + "step_errors", "Cycle steps Slurm refused (the cycle went on)", registry=r
        )
        self.refused = Counter(
            p + "updates_refused",
            "Changes Slurm refused for lack of rights, by action",
            ["action"],
            registry=r,
        )
        for action in ("site_factor", "partition", "features", "preemption"):
            self.refused.labels(action)
        self.preemptions = Counter(
            p + "preemptions",
            "Preemption steps by outcome and reason",
            ["outcome", "reason"],
            registry=r,
        )
        self.lost_work = Counter(
            p + "lost_work",
            "Preemptions requeued before the job's checkpoint finished, per account",
            ["account"],
            registry=r,
        )
        self.usage = Gauge(
            p + "account_usage_gpu_seconds",
            "Decayed GPU-seconds used per account",
            ["account"],
            registry=r,
        )
        self.usage_fraction = Gauge(
            p + "account_usage_fraction",
            "Account's fraction of all decayed usage",
            ["account"],
            registry=r,
        )
        self.share_fraction = Gauge(
            p + "account_share_fraction",
            "Account's fraction of the fair-share shares",
            ["account"],
            registry=r,
        )
        for outcome in ("ok", "degraded", "slurm_unreachable", "failed"):
            self.cycles.labels(outcome)
        Gauge(
            p + "active",
            "1 while this instance runs cycles against slurmctld (one per cluster at most)",
            registry=r,
        ).set_function(self._active)
        self.sample_age = Gauge(
            p + "telemetry_sample_age_seconds",
            "Age of each node's newest gpu-agent sample at the last cycle",
            ["node"],
            registry=r,
        )
        self.stale_nodes = Gauge(
            p + "telemetry_stale_nodes",
            "Nodes whose newest gpu-agent sample is too old for idle detection",
            registry=r,
        )
        self.fresh_nodes = Gauge(
            p + "telemetry_fresh_nodes",
            "Nodes with a gpu-agent sample recent enough for idle detection",
            registry=r,
        )
        self.stale_after = Gauge(
            p + "telemetry_stale_after_seconds",
            "How old a gpu-agent sample may be for idle detection (0: no telemetry)",
            registry=r,
        )
        self._leadership = None
        Gauge(
            p + "leader",
            "1 while this instance holds the leader lease and acts; 0 while it stands by",
            registry=r,
        ).set_function(self._leader)
        Gauge(
            p + "leader_epoch",
            "The leader epoch this instance holds (0 while it stands by)",
            registry=r,
        ).set_function(self._epoch)
        self._memory_gauges(r)
        self.started.set(self.clock())
        self._victim_reason: dict[int, str] = {}

    @staticmethod
    def _memory_gauges(r: CollectorRegistry) -> None:
        Gauge(
            PREFIX + "python_allocated_blocks",
            "Memory blocks Python has allocated and not freed",
            registry=r,
        ).set_function(process_memory.python_blocks)
        if process_memory.malloc_bytes() is not None:
            Gauge(
                PREFIX + "malloc_used_bytes", "C heap in use (glibc mallinfo2)", registry=r
            ).set_function(lambda: process_memory.malloc_bytes()[0])
            Gauge(
                PREFIX + "malloc_free_bytes", "C heap freed but kept by the allocator", registry=r
            ).set_function(lambda: process_memory.malloc_bytes()[1])
        if process_memory.sqlite_bytes() is not None:
            Gauge(
                PREFIX + "sqlite_memory_bytes", "Memory SQLite holds in this process", registry=r
            ).set_function(process_memory.sqlite_bytes)

    def watch(self, leadership) -> None:
        """Report this leadership (prioritizer.leader.Leadership) in the leader gauges; without
        one (no lease in use) the instance counts as leader."""
        self._leadership = leadership

    def _leader(self) -> float:
        ld = self._leadership
        return 1.0 if ld is None or (ld.leading and ld.lease.held) else 0.0

    def _epoch(self) -> float:
        ld = self._leadership
        epoch = ld.lease.epoch if ld is not None and ld.leading else None
        return float(epoch or 0)

    def _active(self) -> float:
        ran = self._ran_at
        return 1.0 if ran is not None and self.clock() - ran <= self.active_for_s else 0.0

    def failed(self, outcome: str) -> None:
        self.cycles.labels(outcome).inc()
        if outcome != "slurm_unreachable":  # it reached Slurm, and may have changed jobs
            self._ran_at = self.clock()

    def observe(self, report: CycleReport, prio: Prioritizer | None = None) -> None:
        """Record one completed cycle (and, given the prioritizer, its ledger's account usage)."""
        outcome = getattr(report, "outcome", "ok")
        self.cycles.labels(outcome).inc()
        for action, n in getattr(report, "denied", {}).items():
            self.refused.labels(action).inc(n)
        self.duration.observe(report.seconds.get("total", 0.0))
        for phase, s in report.seconds.items():
            self.phase.labels(phase).set(s)
        if not report.dry_run:
            self.save.observe(report.seconds.get("store", 0.0))
        if outcome != "failed":  # a cycle whose every Slurm update failed changed nothing
            self.last_success.set(self.clock())
        if not report.dry_run:
            self._ran_at = self.clock()
        self._telemetry(report)
        self.cycle_no.set(report.cycle)
        self.jobs.clear()
        for state in ("pending", "running"):
            for cls, n in report.jobs_by_class.get(state, {}).items():
                self.jobs.labels(state, cls).set(n)
        self.pushes.inc(report.pushed_jobs)
        self.push_calls.inc(report.push_calls)
        reasons = self._victim_reason
        for p in (
            report.planned
        ):  # re-planned while open, so not counted; only remembered for the reason
            for v in p.get("victims", ()):
                reasons.pop(v, None)  # the latest plans last: the oldest go first below
                reasons[v] = preemption_reason(p.get("reason", ""))
        while len(reasons) > VICTIMS_KEPT:  # victims planned but never signalled
            del reasons[next(iter(reasons))]
        for v in report.signalled:
            self.preemptions.labels("signalled", self._victim_reason.get(v, "unknown")).inc()
        for v in report.requeued:
            self.preemptions.labels("requeued", self._victim_reason.get(v, "unknown")).inc()
        for v, state in report.closed:  # finished, abandoned, or requeued by the job itself
            self.preemptions.labels(state, self._victim_reason.pop(v, "unknown")).inc()
        for account in getattr(report, "lost_work", ()):
            self.lost_work.labels(account or "-").inc()
        for r in getattr(report, "refused", ()):  # Slurm refused the signal or the requeue
            self.preemptions.labels(
                "refused", self._victim_reason.pop(r.get("job"), "unknown")
            ).inc()
        for _ in getattr(report, "errors", ()):  # a step Slurm refused; the cycle went on
            self.step_errors.inc()
        if prio is not None and prio.ledger is not None:
            self._accounts(prio, report.now)

    def _telemetry(self, report: CycleReport) -> None:
        ages = getattr(report, "telemetry_ages", None)
        self.sample_age.clear()
        if ages is None:
            for g in (self.stale_nodes, self.fresh_nodes, self.stale_after):
                g.set(0)
            return
        f = Freshness(ages, report.telemetry_stale_after_s)
        for node, age in ages.items():
            self.sample_age.labels(node).set(round(age, 1))
        self.stale_nodes.set(len(f.stale))
        self.fresh_nodes.set(len(f.fresh))
        self.stale_after.set(f.limit)

    def _accounts(self, prio: Prioritizer, now: float) -> None:
        usage = prio.ledger.usage_all(now)
        total = sum(usage.values())
        fs = prio.config.policy.fairshare
        shares = dict(fs.shares) if fs is not None else {}
        default_share = fs.default_share if fs is not None else 1.0
        accounts = set(usage) | set(shares)
        total_shares = sum(shares.get(a, default_share) for a in accounts) or 1.0
        for g in (self.usage, self.usage_fraction, self.share_fraction):
            g.clear()
        for a in sorted(accounts):
            label = a or "-"
            u = usage.get(a, 0.0)
            self.usage.labels(label).set(u)
            self.usage_fraction.labels(label).set(u / total if total > 0 else 0.0)
            self.share_fraction.labels(label).set(shares.get(a, default_share) / total_shares)
