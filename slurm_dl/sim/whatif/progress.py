"""A one-line progress bar on stderr for long replays (simulated time, jobs finished, ETA).

Shown only when the stream is a terminal, and only once a policy has run for ``after_s``
seconds (short runs print nothing). The engine calls :meth:`Progress.update` after every event
time at which jobs finished; the bar redraws at most every ``every_s`` seconds.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _clock(s: float) -> str:
    s = max(0, int(s))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class Progress:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        enabled: bool = True,
        after_s: float = 2.0,
        every_s: float = 0.25,
        width: int = 79,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.after_s, self.every_s, self.width = after_s, every_s, width
        self.label = ""
        self.total_jobs = 0
        self.done_before = 0  # jobs finished in earlier runs of this policy (fairness runs)
        self.span: tuple[float, float] = (0.0, 0.0)
        self.t0 = self.last = 0.0
        self.shown = False
        self.total_tasks = 0

    def begin(self, label: str, total_jobs: int, first_submit: float, last_submit: float) -> None:
        """A new policy: ``total_jobs`` counts every job its runs will finish."""
        self.clear()
        self.label, self.total_jobs, self.done_before = label, max(1, total_jobs), 0
        self.span = (first_submit, max(first_submit + 1.0, last_submit))
        self.t0 = self.last = time.monotonic()

    def _due(self) -> float | None:
        """Now, when the bar is on and due to be drawn again (and marks it drawn); else None."""
        if not self.enabled:
            return None
        t = time.monotonic()
        if t - self.t0 < self.after_s or t - self.last < self.every_s:
            return None
        self.last = t
        return t

    def next_run(self, finished: int) -> None:
        self.done_before += finished

    def update(self, now: float, finished: int) -> None:
        t = self._due()
        if t is None:
            return
        done = self.done_before + finished
        frac = min(1.0, done / self.total_jobs)
        elapsed = t - self.t0
        eta = _clock(elapsed * (1 - frac) / frac) if frac >= 0.01 else "–"
        day = (now - self.span[0]) / 86400.0
        days = (self.span[1] - self.span[0]) / 86400.0
        text = (
            f"{self.label}: day {day:.0f}/{days:.0f}, {done}/{self.total_jobs} jobs, "
            f"{_clock(elapsed)} elapsed, ETA {eta}"
        )
        self._draw(text, frac)

    def begin_tasks(self, tasks: int, jobs: int) -> None:
        """A what-if of ``tasks`` replays that together replay ``jobs`` jobs (:meth:`tick`)."""
        self.clear()
        self.label, self.total_jobs, self.done_before = "", max(1, jobs), 0
        self.total_tasks = max(1, tasks)
        self.t0 = self.last = time.monotonic()

    def tick(self, tasks_done: int, jobs_done: int) -> None:
        """Replays finished and jobs replayed so far, in every process."""
        t = self._due()
        if t is None:
            return
        frac = min(1.0, jobs_done / self.total_jobs)
        elapsed = t - self.t0
        eta = _clock(elapsed * (1 - frac) / frac) if frac >= 0.01 else "–"
        text = (
            f"{tasks_done}/{self.total_tasks} replays, {jobs_done}/{self.total_jobs} jobs, "
            f"{_clock(elapsed)} elapsed, ETA {eta}"
        )
        self._draw(text, frac)

    def _draw(self, text: str, frac: float) -> None:
        bar_w = max(0, self.width - len(text) - 3)
        bar = "#" * int(bar_w * frac) + "-" * (bar_w - int(bar_w * frac))
        self.stream.write("\r" + (f"[{bar}] " if bar_w >= 8 else "") + text[: self.width])
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.shown = False
