"""The units a what-if shows its times in, chosen once from the span of the history: a
22-minute history in minutes, a day in hours, a month in hours with its makespan in days.
The table printed as the runs finish and the HTML report both read the choice from here, so
the two always agree. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


@dataclass(frozen=True)
class Unit:
    seconds: float
    short: str  # in a narrow column's head: "JCT m"
    label: str  # in a wider head: "mean JCT (min)"
    word: str  # in a sentence: "times in minutes"

    def of(self, seconds: float) -> float:
        return seconds / self.seconds


SECONDS = Unit(1.0, "s", "s", "seconds")
MINUTES = Unit(MINUTE, "m", "min", "minutes")
HOURS = Unit(HOUR, "h", "h", "hours")
DAYS = Unit(DAY, "d", "d", "days")


@dataclass(frozen=True)
class TimeUnits:
    """``time``: JCT and waits; ``span``: the makespan and the time axes of the charts."""

    time: Unit
    span: Unit

    def describe(self) -> str:
        """The units in words, for a table's foot: ``times in minutes (m)``."""
        if self.time == self.span:
            return f"times in {self.time.word} ({self.time.short})"
        return (
            f"times in {self.time.word} ({self.time.short}), "
            f"span in {self.span.word} ({self.span.short})"
        )


def units_for(span_s: float) -> TimeUnits:
    """The units for a history that spans ``span_s`` seconds. The makespan: seconds under 2
    minutes, minutes under 2 hours, hours under 2 days, else days. JCT and waits: seconds
    under 10 minutes, minutes under 12 hours, else hours (a job of a short history lasts
    seconds or minutes; 0.01 h says nothing)."""

    def below(limits: tuple[tuple[float, Unit], ...], last: Unit) -> Unit:
        return next((u for limit, u in limits if span_s < limit), last)

    span = below(((2 * MINUTE, SECONDS), (2 * HOUR, MINUTES), (2 * DAY, HOURS)), DAYS)
    time = below(((10 * MINUTE, SECONDS), (12 * HOUR, MINUTES)), HOURS)
    return TimeUnits(time, span)


def history_span(jobs: Iterable) -> float:
    """Seconds from the first submission to the last end the trace gives (a job's submit time
    plus its run time); 0 for no jobs."""
    rows = [(j.submit_time, j.submit_time + (j.duration or 0.0)) for j in jobs]
    if not rows:
        return 0.0
    return max(e for _s, e in rows) - min(s for s, _e in rows)
