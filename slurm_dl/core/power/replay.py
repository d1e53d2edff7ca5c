"""Replay a recorded node-demand series (nodes in use out of the group's nodes, per minute or
per step) through a power policy, and count what it would have kept off and where it fell short.

The series is cut into planner steps; a step's demand is the most nodes in use at any of its
minutes (a shortfall within the step counts). At each step the policy decides from what it has
seen before the step (the previous steps' demand), then the step's demand meets the powered
nodes: ``short_node_intervals`` adds up, over the steps, the nodes demand exceeded the powered
ones by. A *change* is a step at which the number of powered nodes differs from the step before
(a power-up and a power-down at once would be two; the policies here never do both); the
predictive replay starts with every node powered, so its first power-down is a change. Work that
finds too few nodes powers them up at once (they count as powered from the next step on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..config.power import PowerConfig
from .decision import POWERED, NodeState, Power, decide
from .forecast import TREND_STEPS, fit_demand_model, forecast_peak


@dataclass(frozen=True)
class DemandPoint:
    """Nodes in use (``active``) out of ``total`` at ``time``."""

    time: datetime
    active: int
    total: int


@dataclass(frozen=True)
class ReplayResult:
    policy: str
    steps: int
    days: float
    powered_off_mean: float  # nodes powered off, on average over the steps
    powered_mean: float
    active_mean: float
    short_intervals: int  # steps where demand exceeded the powered nodes
    short_node_intervals: int  # the sum of those excesses, in nodes
    changes: int  # steps at which the powered count changed
    changes_per_day: float
    max_node_cycles_per_day: int | None  # the most power-downs of one node in a day (None:
    # not tracked: interchangeable nodes)

    def as_dict(self) -> dict[str, float | int | str]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def step_series(points: Sequence[DemandPoint], step_minutes: int) -> list[DemandPoint]:
    """One point per step (the step's start): the most ``active`` in it, its last ``total``.
    Points must be in time order; steps without points are left out."""
    out: list[DemandPoint] = []
    step = step_minutes * 60
    for p in points:
        ts = p.time.timestamp()
        start = datetime.fromtimestamp(ts - ts % step, tz=p.time.tzinfo)
        if out and out[-1].time == start:
            last = out[-1]
            out[-1] = DemandPoint(start, max(last.active, p.active), p.total)
        elif out and start < out[-1].time:
            raise ValueError(f"demand: {p.time} comes after {out[-1].time}; sort by time")
        else:
            out.append(DemandPoint(start, p.active, p.total))
    return out


def _window(steps: Sequence[DemandPoint], start: datetime, end: datetime) -> tuple[int, int]:
    first = next((i for i, p in enumerate(steps) if p.time >= start), len(steps))
    last = next((i for i, p in enumerate(steps) if p.time >= end), len(steps))
    if first >= last:
        raise ValueError(f"demand: no steps from {start} to {end}")
    if first == 0:
        raise ValueError(f"demand: nothing before {start} to start from")
    return first, last


class _Count:
    """The tallies every replay keeps."""

    def __init__(self, policy: str, powered_before: int | None = None) -> None:
        self.policy = policy
        self.steps = self.off = self.powered = self.active = 0
        self.short = self.short_nodes = self.changes = 0
        self.prev = powered_before

    def add(self, p: DemandPoint, powered: int) -> None:
        self.steps += 1
        self.off += p.total - powered
        self.powered += powered
        self.active += p.active
        excess = p.active - powered
        if excess > 0:
            self.short += 1
            self.short_nodes += excess
        if self.prev is not None and powered != self.prev:
            self.changes += 1
        self.prev = powered

    def result(self, step_minutes: int, cycles: int | None) -> ReplayResult:
        days = self.steps * step_minutes / (24 * 60)
        n = max(1, self.steps)
        return ReplayResult(
            policy=self.policy,
            steps=self.steps,
            days=days,
            powered_off_mean=self.off / n,
            powered_mean=self.powered / n,
            active_mean=self.active / n,
            short_intervals=self.short,
            short_node_intervals=self.short_nodes,
            changes=self.changes,
            changes_per_day=self.changes / days if days else 0.0,
            max_node_cycles_per_day=cycles,
        )


def replay_predictive(
    steps: Sequence[DemandPoint],
    train_until: datetime,
    start: datetime,
    end: datetime,
    cfg: PowerConfig,
) -> ReplayResult:
    """The predictive policy (``decide`` on ``forecast_peak``), the model fit on the steps
    before ``train_until``, replayed on the steps from ``start`` to ``end`` as one node group
    of ``total`` nodes (``cfg.enabled`` is taken as on)."""
    cfg = cfg.model_copy(update={"enabled": True})
    train = [p for p in steps if p.time < train_until]
    model = fit_demand_model(
        [p.time for p in train],
        [p.active for p in train],
        cfg.forecast_steps,
        cfg.forecast_quantile,
    )
    first, last = _window(steps, start, end)
    size = max(p.total for p in steps[first:last])
    names = [f"n{i:05d}" for i in range(size)]
    power = dict.fromkeys(names, Power.ON)
    cycles = dict.fromkeys(names, 0)
    most, day = 0, steps[first].time.date()
    last_down: datetime | None = None
    count = _Count("predictive", size)  # every node on before the first step
    history = [p.active for p in steps[max(0, first - 2 * TREND_STEPS) : first]]
    for p in steps[first:last]:
        if p.time.date() != day:
            day, cycles = p.time.date(), dict.fromkeys(names, 0)
        present = names[: p.total]
        seen = history[-1]
        nodes = _nodes(present, power, cycles, seen)
        waiting = max(0, seen - sum(1 for n in nodes if n.busy))
        peak = forecast_peak(model, history, p.time)
        d = decide("replay", nodes, waiting, peak, cfg, p.time, last_down)
        last_down = d.last_down
        for name in d.power_up:
            power[name] = Power.ON
        for name in d.power_down:
            power[name] = Power.OFF
            cycles[name] += 1
            most = max(most, cycles[name])
        count.add(p, sum(1 for name in present if power[name] in POWERED))
        history.append(p.active)
    return count.result(cfg.step_minutes, most)


def _nodes(
    present: Sequence[str], power: dict[str, Power], cycles: dict[str, int], busy: int
) -> list[NodeState]:
    """The group's nodes, the first ``busy`` powered ones holding work."""
    out = []
    for name in present:
        on = power[name] in POWERED
        b = on and busy > 0
        busy -= 1 if b else 0
        out.append(NodeState(name, power[name], busy=b, cycles_today=cycles[name]))
    return out


def replay_all_on(
    steps: Sequence[DemandPoint], start: datetime, end: datetime, step_minutes: int
) -> ReplayResult:
    """No power saving: every node powered."""
    first, last = _window(steps, start, end)
    count = _Count("all-on")
    for p in steps[first:last]:
        count.add(p, p.total)
    return count.result(step_minutes, 0)


def replay_idle_timeout(
    steps: Sequence[DemandPoint],
    start: datetime,
    end: datetime,
    step_minutes: int,
    timeout_s: float,
) -> ReplayResult:
    """Slurm's fixed SuspendTime: a node idle for ``timeout_s`` powers down, and work that
    finds too few powered nodes powers them up at once. With interchangeable nodes the
    powered count is the most demand of the steps within the timeout."""
    first, last = _window(steps, start, end)
    back = max(1, round(timeout_s / (step_minutes * 60)))
    count = _Count(f"fixed:{int(timeout_s)}")
    for i in range(first, last):
        p = steps[i]
        count.add(p, min(p.total, max(q.active for q in steps[max(0, i - back) : i])))
    return count.result(step_minutes, None)
