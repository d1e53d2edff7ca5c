"""Pacing against a slow slurmctld: fewer SiteFactor updates and longer gaps while it answers slowly.

Each cycle measures how long its Slurm calls took (the snapshot and the SiteFactor updates).
Above ``threshold_s`` the controller is taken to be busy: the next cycle comes one interval
later per slow cycle in a row (up to ``max_skip`` intervals) and pushes half as many updates
(down to ``min_batch``); the daemon logs this once. Each cycle under half the threshold takes one
step back, until the configured pace returns (logged once again). Pure: the caller passes the
latency and a monotonic clock, so it is tested without Slurm and without sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Pacing:
    threshold_s: float  # Slurm calls slower than this in one cycle: back off (0: never)
    interval_s: float
    batch: int  # configured SiteFactor updates per cycle (0: no limit)
    min_batch: int = 50
    max_skip: int = 8
    skip: int = 0  # intervals left out after each cycle while slow
    limit: int | None = None  # updates per cycle while slow (None: the configured batch)
    resume_at: float = 0.0

    @property
    def slow(self) -> bool:
        return self.skip > 0 or self.limit is not None

    def ready(self, now: float) -> bool:
        return now >= self.resume_at

    def observe(self, slurm_s: float, pushed: int, now: float) -> str | None:
        """Take one cycle's Slurm time (``pushed``: the updates it sent); returns a line to log
        when the pace changes between normal and slowed, else None."""
        was = self.slow
        if self.threshold_s > 0 and slurm_s > self.threshold_s:
            self.skip = min(self.max_skip, self.skip + 1)
            start = (
                self.limit
                if self.limit is not None
                else (self.batch or pushed or self.min_batch * 2)
            )
            floor = min(self.min_batch, self.batch) if self.batch else self.min_batch
            self.limit = max(floor, start // 2)
        elif slurm_s <= self.threshold_s / 2 and was:
            self.skip = max(0, self.skip - 1)
            if self.limit is not None:
                self.limit *= 2
                if (self.batch and self.limit >= self.batch) or (not self.batch and self.skip == 0):
                    self.limit = None
        self.resume_at = now + self.skip * self.interval_s
        if self.slow and not was:
            return (
                f"slurmctld answers slowly ({slurm_s:.1f} s of Slurm calls in one cycle, over "
                f"{self.threshold_s:g} s): cycles spaced out, at most {self.limit} SiteFactor "
                f"updates each, until it recovers"
            )
        if was and not self.slow:
            return "slurmctld answers in time again; cycles back to their configured pace"
        return None
