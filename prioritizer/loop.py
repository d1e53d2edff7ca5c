"""Run the cycle forever on an APScheduler 3.x interval job, backing off while Slurm is down.

The interval job has ``max_instances=1`` and ``coalesce=True``: a slow cycle never overlaps the
next, and missed runs collapse into one. When slurmctld cannot be reached the loop logs one line,
skips cycles for 1, 2, 4 … seconds (capped at ``prioritizer.backoff_max_seconds``) and logs one
line again when a cycle succeeds. With a ``leadership`` (``leader.py``) a cycle runs only
while this daemon holds the leader lease; otherwise it stands by and tries to take it each tick. A failing database (damaged, locked, unreachable) is logged
at ERROR each cycle; after ``prioritizer.store_failures_max`` failing cycles in a row the loop
stops with ``exit_code`` 1, so the service manager restarts the daemon and alerts fire.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Callable

from apscheduler.schedulers.blocking import BlockingScheduler

from slurm_dl.core.errors import NotLeaderError, SlurmError, SlurmUnavailableError, StoreError

from .cycle import CycleReport, Prioritizer
from .heap import Heap
from .pacing import Pacing

log = logging.getLogger("slurm_dl.prioritizer")


class Backoff:
    """Exponential backoff state, on a monotonic clock passed in (testable without sleeping)."""

    def __init__(self, maximum_s: float, first_s: float = 1.0) -> None:
        self.maximum_s = maximum_s
        self.first_s = first_s
        self.delay_s = 0.0
        self.resume_at = 0.0
        self.failures = 0

    def ready(self, now: float) -> bool:
        return now >= self.resume_at

    def failed(self, now: float) -> float:
        self.failures += 1
        self.delay_s = min(self.maximum_s, self.first_s if self.delay_s == 0 else self.delay_s * 2)
        self.resume_at = now + self.delay_s
        return self.delay_s

    def succeeded(self) -> bool:
        """Reset; True when this ends a run of failures."""
        was = self.failures > 0
        self.delay_s, self.resume_at, self.failures = 0.0, 0.0, 0
        return was


class Loop:
    def __init__(
        self,
        prio: Prioritizer,
        *,
        on_report: Callable[[CycleReport], None] | None = None,
        max_cycles: int | None = None,
        metrics=None,
        leadership=None,
    ) -> None:
        self.prio = prio
        self.leadership = leadership  # prioritizer.leader.Leadership, or None (no lease)
        self.metrics = metrics  # prioritizer.metrics.PrioritizerMetrics, or None
        self.interval_s = prio.config.prioritizer.interval_seconds
        self.backoff = Backoff(prio.config.prioritizer.backoff_max_seconds)
        pc = prio.config.prioritizer
        self.pacing = Pacing(pc.slow_slurm_seconds, pc.interval_seconds, pc.max_pushes_per_cycle)
        self.on_report = on_report
        self.max_cycles = max_cycles
        self.cycles = 0
        self.store_failures = 0  # cycles in a row whose database read or write failed
        self.store_failures_max = prio.config.prioritizer.store_failures_max
        self.exit_code = 0  # 1: stopped because the database kept failing
        self.scheduler = BlockingScheduler()
        self._stop = threading.Event()
        self.heap = Heap()  # garbage collection paced by cycles (started by ``run``)

    def tick(self) -> CycleReport | None:
        """One scheduled run: a cycle unless backing off. Expected failures never escape."""
        now = time.monotonic()
        if not self.backoff.ready(now) or not self.pacing.ready(now):
            return None
        if self.leadership is not None and not self._leads():
            return None
        try:
            report = self.prio.run_cycle()
        except NotLeaderError as e:  # before StoreError: not a failing database
            if self.leadership is not None:
                self.leadership.lost(_one_line(e))
            return None
        except SlurmUnavailableError as e:
            if self.metrics is not None:
                self.metrics.failed("slurm_unreachable")
            delay = self.backoff.failed(now)
            log.warning("slurmctld unreachable (%s); retrying in %.0f s", _one_line(e), delay)
            return None
        except StoreError as e:
            if self.metrics is not None:
                self.metrics.failed("failed")
            self.store_failures += 1
            if self.store_failures >= self.store_failures_max:
                log.error(
                    "the database failed %d cycles in a row: %s; stopping (exit 1) so the service "
                    "manager restarts the daemon and the alert fires",
                    self.store_failures,
                    _one_line(e),
                )
                self.exit_code = 1
                self.stop()
                return None
            delay = self.backoff.failed(now)
            log.error(
                "cycle failed: %s; retrying in %.0f s (%d of %d failures in a row before the daemon "
                "exits)",
                _one_line(e),
                delay,
                self.store_failures,
                self.store_failures_max,
            )
            return None
        except SlurmError as e:
            if self.metrics is not None:
                self.metrics.failed("failed")
            delay = self.backoff.failed(now)
            log.warning("cycle failed: %s; retrying in %.0f s", _one_line(e), delay)
            return None
        finally:
            self.heap.after_cycle()  # failed cycles leave garbage too
        self.store_failures = 0
        if self.backoff.succeeded():
            log.warning("slurmctld reachable again; cycles resumed")
        self.cycles += 1
        change = self.pacing.observe(report.slurm_s, report.pushed_jobs, time.monotonic())
        self.prio.push_limit = self.pacing.limit
        if change is not None:
            log.warning("%s", change)
        if self.metrics is not None:
            self.metrics.observe(report, self.prio)
        _log_outcome(report)
        if self.on_report is not None:
            self.on_report(report)
        if self.max_cycles is not None and self.cycles >= self.max_cycles:
            self.stop()
        return report

    def _leads(self) -> bool:
        try:
            return self.leadership.step()
        except StoreError as e:  # the database unreachable: no leader here until it answers
            self.leadership.lost(_one_line(e))
            log.error("cannot reach the leader lease: %s; standing by", _one_line(e))
            return False

    def rebuild(self) -> None:
        """A fresh prioritizer (at a take-over): its state rebuilt from the store and Slurm, as
        at a start, since another leader changed both meanwhile."""
        p = self.prio
        self.prio = type(p)(p.config, p.backend, p.store, dry_run=p.dry_run, planner=p.planner)

    def stop(self, *_args) -> None:
        self._stop.set()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    def run(self) -> None:
        """Block until SIGTERM/SIGINT (or ``max_cycles``)."""
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
        self.scheduler.add_job(
            self.tick,
            "interval",
            seconds=self.interval_s,
            max_instances=1,
            coalesce=True,
            next_run_time=_now_dt(),
            id="prioritizer-cycle",
        )
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.stop)
        self.heap.start()
        try:
            self.scheduler.start()
        except (KeyboardInterrupt, SystemExit):
            self.stop()
        finally:
            self.heap.release()


DENIED_HINT = (
    "Slurm refuses this daemon's changes: its user lacks operator rights "
    "(sacctmgr modify user NAME set adminlevel=operator), or the filter does not trust it "
    "([prioritizer] user, then slurm-dl filter install); slurm-dl doctor checks both"
)


def _log_outcome(report: CycleReport) -> None:
    """A cycle whose Slurm updates failed is logged as such, with the fix when Slurm refused
    them for lack of rights (what the daemon sees as "Invalid user id" or "Access denied")."""
    outcome = getattr(report, "outcome", "ok")
    if outcome == "ok":
        return
    level = logging.ERROR if outcome == "failed" else logging.WARNING
    log.log(level, "%s %s", outcome, report.summary())
    if getattr(report, "denied", None):
        log.log(level, "%s", DENIED_HINT)


def _now_dt():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def _one_line(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
