"""The demand forecast: how many nodes of a group may be in use within the look-ahead.

Demand is nodes in use (running work plus the nodes waiting work needs), one value per planner
step. The model is learnt from the site's own history: for every step of it, how far demand rose
above the last value within the look-ahead; a high quantile of those rises, taken per hour of the
day, weekday or weekend, and recent trend (rising, flat, falling), is what the forecast adds to
the demand seen now. A bucket with too few samples falls back to coarser ones (the hour alone,
then all). Plain data in, plain data out: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

TREND_STEPS = 6
"""Steps in each of the two windows whose means give the recent trend."""
MIN_BUCKET = 20
"""Fewer samples than this in a bucket: use the coarser bucket."""

Bucket = tuple[int, bool, int]  # (hour of day, weekend, trend: -1 falling, 0 flat, 1 rising)


@dataclass(frozen=True)
class DemandModel:
    """Rises of demand within the look-ahead, by bucket, as learnt from a history."""

    horizon_steps: int
    quantile: float
    rises: Mapping[Bucket, float]
    by_hour: Mapping[int, float]
    overall: float
    samples: int

    def rise(self, now: datetime, trend: int) -> float:
        """The rise to expect from ``now`` on, with the recent ``trend``."""
        key = (now.hour, now.weekday() >= 5, trend)
        if key in self.rises:
            return self.rises[key]
        return self.by_hour.get(now.hour, self.overall)


def trend_of(recent: Sequence[float]) -> int:
    """1 if the last TREND_STEPS values' mean is above the TREND_STEPS before them by more than
    one node, -1 if below by more than one, else 0 (also when there is too little to tell)."""
    if len(recent) < 2 * TREND_STEPS:
        return 0
    last = sum(recent[-TREND_STEPS:]) / TREND_STEPS
    before = sum(recent[-2 * TREND_STEPS : -TREND_STEPS]) / TREND_STEPS
    if last - before > 1.0:
        return 1
    if before - last > 1.0:
        return -1
    return 0


def _quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def fit_demand_model(
    times: Sequence[datetime], demand: Sequence[float], horizon_steps: int, quantile: float
) -> DemandModel:
    """Learn the rises from a history of one value per step (``times`` ascending, evenly
    spaced, ``demand`` the nodes in use in each step). Raises ValueError when the history is
    shorter than two look-aheads."""
    if len(times) != len(demand):
        raise ValueError(f"history: {len(times)} times but {len(demand)} demand values")
    h = max(1, horizon_steps)
    if len(demand) < 2 * h + 1:
        raise ValueError(
            f"history: {len(demand)} steps; need at least {2 * h + 1} (two look-aheads)"
        )
    buckets: dict[Bucket, list[float]] = {}
    hours: dict[int, list[float]] = {}
    every: list[float] = []
    for i in range(1, len(demand) - h + 1):
        rise = max(demand[i : i + h]) - demand[i - 1]
        trend = trend_of(demand[max(0, i - 2 * TREND_STEPS) : i])
        t = times[i]
        buckets.setdefault((t.hour, t.weekday() >= 5, trend), []).append(rise)
        hours.setdefault(t.hour, []).append(rise)
        every.append(rise)
    return DemandModel(
        horizon_steps=h,
        quantile=quantile,
        rises={k: _quantile(v, quantile) for k, v in buckets.items() if len(v) >= MIN_BUCKET},
        by_hour={k: _quantile(v, quantile) for k, v in hours.items() if len(v) >= MIN_BUCKET},
        overall=_quantile(every, quantile),
        samples=len(every),
    )


def forecast_peak(model: DemandModel, recent: Sequence[float], now: datetime) -> float:
    """The demand's expected peak within the look-ahead from ``now``: the last value of
    ``recent`` (demand per step, oldest first, at least one) plus the rise learnt for this
    hour, day and trend; never below the last value."""
    if not recent:
        raise ValueError("forecast_peak: no recent demand")
    last = recent[-1]
    return last + max(0.0, model.rise(now, trend_of(recent)))


def nodes_for(peak: float, buffer: int, minimum: int, total: int) -> int:
    """Nodes to keep powered for a forecast ``peak``: the peak plus the buffer, at least the
    minimum, at most the group's ``total``."""
    return max(min(minimum, total), min(total, math.ceil(peak - 1e-9) + buffer))
