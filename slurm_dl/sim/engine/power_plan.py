"""The predictive power policy in a replay: the core's forecast and ``decide`` (the live
planner's code, :mod:`slurm_dl.core.power`) on each node group, every ``step_minutes``.

The forecast learns from the replay so far, never from the trace ahead: each step's demand
(the most nodes holding a job during the step, plus the nodes the waiting jobs need) is kept,
and the model is fitted again at the first step of each day on the last ``FIT_DAYS`` days of
it. Until there are two look-aheads of history there is no model and every node stays on.
A node's power cycles count against ``max_cycles_per_node_per_day`` until the day (UTC) ends.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

from ...core.power import NodeState, decide, fit_demand_model, forecast_peak
from ...core.power.forecast import TREND_STEPS

FIT_DAYS = 28
"""Days of the replay's own history the forecast is fitted on (the last ones)."""


class Planner:
    """Drives ``decide`` for a :class:`~.power.PowerModel`'s node groups."""

    def __init__(self, model, origin: float) -> None:
        self.model = model
        cfg = model.cfg.model_copy(update={"enabled": True})  # --power-save predictive: on
        self.cfg = cfg
        self.step_s = cfg.step_seconds
        self.h = cfg.forecast_steps
        self.members = [
            [i for i, s in enumerate(model.nodes) if s.group == g] for g in range(len(model.groups))
        ]
        self.names = [f"n{i:05d}" for i in range(len(model.nodes))]
        self.times: list[datetime] = []
        self.demand: list[list[float]] = [[] for _ in model.groups]
        self.fits: list = [None] * len(model.groups)
        self.last_down: list[datetime | None] = [None] * len(model.groups)
        self.day = None
        self.decisions = 0

    def next_step(self, t: float) -> float:
        """The first step boundary after ``t``."""
        return (math.floor(t / self.step_s) + 1) * self.step_s

    def step(self, t: float) -> None:
        """The step that has just ended at ``t``: its demand kept, then a decision per group."""
        m = self.model
        now = datetime.fromtimestamp(t, timezone.utc)
        self.times.append(now)
        waits = []
        for g, members in enumerate(self.members):
            per = max(m.nodes[i].gpus for i in members)
            waits.append(min(len(members), -(-m.waiting_gpus // per)))
            self.demand[g].append(m.peak[g] + waits[-1])
            m.peak[g] = m.busy[g]
        if now.date() != self.day:
            if self.day is not None:
                m.cycles[:] = [0] * len(m.cycles)
            self.day = now.date()
            self._fit()
        elif self.fits[0] is None and len(self.times) > 2 * self.h:
            self._fit()
        if self.fits[0] is not None:
            for g, members in enumerate(self.members):
                self._decide(g, members, waits[g], now)

    def _fit(self) -> None:
        keep = FIT_DAYS * 86400 // self.step_s
        times = self.times[-keep:]
        if len(times) <= 2 * self.h:
            return
        for g in range(len(self.demand)):
            self.fits[g] = fit_demand_model(
                times, self.demand[g][-keep:], self.h, self.cfg.forecast_quantile
            )

    def _decide(self, g: int, members: list[int], waiting: int, now: datetime) -> None:
        m = self.model
        nodes = [
            NodeState(self.names[i], m.state[i], busy=m.used[i] > 0, cycles_today=m.cycles[i])
            for i in members
        ]
        recent = self.demand[g][-2 * TREND_STEPS :]
        peak = forecast_peak(self.fits[g], recent, now)
        d = decide(m.groups[g], nodes, waiting, peak, self.cfg, now, self.last_down[g])
        self.last_down[g] = d.last_down
        self.decisions += 1
        for name in d.power_up:
            m.power_up(int(name[1:]))
        for name in d.power_down:
            m.power_down(int(name[1:]))
