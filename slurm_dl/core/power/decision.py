"""The decision: which nodes of a group to power up or down now, given their states.

Keep powered the forecast peak plus the buffer (``nodes_for``), never fewer than the site's
minimum. Power up at once when work waits (demand now over the powered nodes) or when the
headroom left falls under the buffer; power down only when the wanted count is at least a
buffer below the powered one, at most once per look-ahead (``forecast_hours``), and only nodes
that hold no job and no reservation and have power cycles left today. Which nodes: power up
the powered-down ones in name order; power down the idle ones that cycled least today, last
names first. Plain data in, plain data out.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..config.power import PowerConfig
from .forecast import nodes_for


class Power(str, enum.Enum):
    ON = "on"
    OFF = "off"
    BOOTING = "booting"  # powering up: counted as powered
    STOPPING = "stopping"  # powering down: counted as off


POWERED = (Power.ON, Power.BOOTING)


@dataclass(frozen=True)
class NodeState:
    """One node as the planner sees it."""

    name: str
    power: Power = Power.ON
    busy: bool = False  # holds a job (or part of one)
    reserved: bool = False  # in a reservation now or soon
    cycles_today: int = 0  # power-downs since the day began


@dataclass(frozen=True)
class PowerDecision:
    """What to do with one node group now, and why."""

    group: str
    powered: int  # powered nodes before the decision
    wanted: int  # what the forecast asks for (peak + buffer, within minimum and size)
    target: int  # powered nodes after the decision
    forecast: float  # the forecast peak demand, nodes
    demand: int  # busy nodes plus the nodes waiting work needs
    power_up: tuple[str, ...] = ()
    power_down: tuple[str, ...] = ()
    reason: str = ""
    last_down: datetime | None = None  # when the group was last powered down (carry it on)
    blocked: tuple[str, ...] = field(default=())  # idle nodes kept up by the cycle budget

    @property
    def changed(self) -> bool:
        return bool(self.power_up or self.power_down)


def decide(
    group: str,
    nodes: Sequence[NodeState],
    waiting_nodes: int,
    forecast: float,
    cfg: PowerConfig,
    now: datetime,
    last_down: datetime | None = None,
) -> PowerDecision:
    """Decide for one node group. ``waiting_nodes``: nodes that pending work needs on top of
    the busy ones; ``forecast``: the forecast peak demand in nodes (``forecast_peak``);
    ``last_down``: when this group was last powered down (the previous decision's)."""
    powered = [n for n in nodes if n.power in POWERED]
    busy = sum(1 for n in nodes if n.busy)
    demand = busy + max(0, waiting_nodes)
    total = len(nodes)
    buffer = cfg.buffer_for(total)
    wanted = nodes_for(max(forecast, demand), buffer, cfg.min_powered_nodes, total)
    base = dict(
        group=group,
        powered=len(powered),
        wanted=wanted,
        forecast=forecast,
        demand=demand,
        last_down=last_down,
    )
    if not cfg.enabled:
        ups = _power_up(nodes, total - len(powered))
        return PowerDecision(
            **base, target=len(powered) + len(ups), power_up=ups, reason="power saving is off"
        )
    short_headroom = len(powered) - demand < buffer
    below_floor = len(powered) < min(cfg.min_powered_nodes, total)
    if demand > len(powered) or (wanted > len(powered) and (short_headroom or below_floor)):
        ups = _power_up(nodes, wanted - len(powered))
        why = "work waits" if demand > len(powered) else "demand is forecast to rise"
        return PowerDecision(
            **base, target=len(powered) + len(ups), power_up=ups, reason=f"power up: {why}"
        )
    held = last_down is not None and now - last_down < timedelta(hours=cfg.forecast_hours)
    if wanted <= len(powered) - max(1, buffer) and not held:
        downs, blocked = _power_down(nodes, len(powered) - wanted, cfg)
        if downs:
            return PowerDecision(
                **{**base, "last_down": now},
                target=len(powered) - len(downs),
                power_down=downs,
                blocked=blocked,
                reason="power down: forecast demand is below the powered nodes",
            )
        return PowerDecision(
            **base,
            target=len(powered),
            blocked=blocked,
            reason="keep: no idle node with power cycles left today",
        )
    return PowerDecision(**base, target=len(powered), reason="keep")


def _power_up(nodes: Sequence[NodeState], count: int) -> tuple[str, ...]:
    if count <= 0:
        return ()
    off = sorted((n.name for n in nodes if n.power is Power.OFF))
    return tuple(off[:count])


def _power_down(
    nodes: Sequence[NodeState], count: int, cfg: PowerConfig
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Up to ``count`` idle, unreserved ON nodes with cycles left (fewest cycles first, last
    names first); and the idle ones the budget kept up."""
    idle = [n for n in nodes if n.power is Power.ON and not n.busy and not n.reserved]
    able = [n for n in idle if n.cycles_today < cfg.max_cycles_per_node_per_day]
    blocked = tuple(sorted(n.name for n in idle if n not in able))
    able.sort(key=lambda n: n.name, reverse=True)
    able.sort(key=lambda n: n.cycles_today)
    return tuple(n.name for n in able[:count]), blocked
