"""The power service: every ``[power] step_minutes``, per node group (the nodes of one GPU
type), record the demand (busy nodes), forecast its peak over the look-ahead, ask the core's
:func:`~slurm_dl.core.power.decide` what to keep powered, and act through Slurm's power saving
(``scontrol update NodeName=… State=POWER_DOWN|POWER_UP``).

What it never does: power down a node with a job, one that a reservation holds now or within
the look-ahead, or one that has made its power cycles today; anything at all in the first
``forecast_hours`` after the daemon starts (its demand history is in memory, so it first
learns the present demand; the forecast model needs a week of it). Until a week is recorded the
forecast is the highest demand of the last look-ahead. A waiting job is counted in its type's
group (without a type, in every group it fits), so a group it waits for is kept up; Slurm's own
ResumeProgram boots a powered-down node it allocates to a job.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from slurm_dl.core.config.power import PowerConfig
from slurm_dl.core.errors import SlurmError
from slurm_dl.core.model import Job, Node
from slurm_dl.core.power import NodeState, PowerDecision, decide, fit_demand_model, forecast_peak
from slurm_dl.slurm.power import node_allocated, node_power

log = logging.getLogger("slurm_dl.prioritizer.power")

MODEL_DAYS = 7  # history needed before the forecast model replaces the recent peak
HISTORY_DAYS = 35  # history kept per group
NOT_WAITING = ("JobHeldUser", "JobHeldAdmin", "Dependency", "DependencyNeverSatisfied")
UNTYPED = "gpu"  # the group of nodes without a GPU type


@dataclass
class PowerStep:
    """What one step decided and did, per group."""

    decisions: list[PowerDecision]
    failed: list[str]  # Slurm's refusals, one line each

    @property
    def changes(self) -> int:
        return sum(len(d.power_up) + len(d.power_down) for d in self.decisions)

    def summary(self) -> dict:
        """The step in numbers, for the cycle report and the metrics."""
        return {
            "groups": {
                d.group: {
                    "powered": d.target,
                    "wanted": d.wanted,
                    "demand": d.demand,
                    "reason": d.reason,
                }
                for d in self.decisions
            },
            "powered_up": sum(len(d.power_up) for d in self.decisions),
            "powered_down": sum(len(d.power_down) for d in self.decisions),
            "failed": list(self.failed),
        }


def group_of(node: Node) -> str:
    return node.gpu_type or UNTYPED


def waiting_nodes(pending: Iterable[Job], group: str, per_node: int, now: float) -> int:
    """Nodes of ``group`` (``per_node`` GPUs each) the pending jobs that may start now need."""
    need = 0
    for j in pending:
        if j.num_gpus <= 0 or j.state_reason in NOT_WAITING:
            continue
        if j.eligible_time is not None and j.eligible_time > now:
            continue  # --begin in the future
        if j.gpu_type is not None and j.gpu_type != group:
            continue
        nodes = j.num_nodes or math.ceil(j.num_gpus / max(1, per_node))
        need += nodes
    return need


class PowerService:
    def __init__(self, cfg: PowerConfig, backend, *, dry_run: bool = False):
        self.cfg = cfg
        self.backend = backend
        self.dry_run = dry_run
        self.started_at: float | None = None  # the first step's time
        self.next_at = 0.0
        steps = int(HISTORY_DAYS * 24 * 60 / cfg.step_minutes)
        self.history: dict[str, deque[tuple[datetime, float]]] = {}
        self._maxlen = steps
        self.cycles: dict[str, int] = {}  # power-downs per node today
        self.day: object = None
        self.last_down: dict[str, datetime | None] = {}
        self.last: PowerStep | None = None

    def due(self, now: float) -> bool:
        return self.cfg.enabled and now >= self.next_at

    def step(self, nodes: Sequence[Node], pending: Sequence[Job], now: float) -> PowerStep:
        """Decide and act for every group; Slurm's refusals are logged and kept, not raised."""
        self.next_at = now + self.cfg.step_minutes * 60.0
        if self.started_at is None:
            self.started_at = now
        t = datetime.fromtimestamp(now, timezone.utc)
        if t.date() != self.day:
            self.day, self.cycles = t.date(), {}
        horizon = self.cfg.forecast_hours * 3600.0
        try:
            reserved = self.backend.reserved_nodes(now, horizon)
        except SlurmError as e:
            log.warning("power: reservations unreadable (%s); powering nothing down", e)
            reserved = {n.name for n in nodes}
        learning = now - self.started_at < horizon
        out = PowerStep([], [])
        groups: dict[str, list[Node]] = {}
        for n in nodes:
            groups.setdefault(group_of(n), []).append(n)
        for group, members in sorted(groups.items()):
            states = [
                NodeState(
                    n.name,
                    node_power(n),
                    busy=n.gpus_used > 0 or node_allocated(n),
                    reserved=learning or n.name in reserved,
                    cycles_today=self.cycles.get(n.name, 0),
                )
                for n in members
            ]
            busy = sum(1 for s in states if s.busy)
            hist = self.history.setdefault(group, deque(maxlen=self._maxlen))
            hist.append((t, float(busy)))
            per_node = max((n.gpus for n in members), default=1)
            waiting = waiting_nodes(pending, group, per_node, now)
            d = decide(
                group,
                states,
                waiting,
                self._forecast(hist, t),
                self.cfg,
                t,
                self.last_down.get(group),
            )
            out.decisions.append(d)
            if self._act(d, out):
                self.last_down[group] = d.last_down  # a refused power-down is tried again
        self.last = out
        return out

    def _forecast(self, hist: Sequence[tuple[datetime, float]], t: datetime) -> float:
        values = [v for _, v in hist]
        span = hist[-1][0] - hist[0][0]
        if span >= timedelta(days=MODEL_DAYS):
            try:
                model = fit_demand_model(
                    [x for x, _ in hist],
                    values,
                    self.cfg.forecast_steps,
                    self.cfg.forecast_quantile,
                )
                return forecast_peak(model, values, t)
            except ValueError:
                pass
        recent = values[-max(1, self.cfg.forecast_steps) :]
        return max(recent)

    def _act(self, d: PowerDecision, out: PowerStep) -> bool:
        """Carry out ``d``; False when Slurm refused its power-down."""
        done = True
        for names, up in ((d.power_up, True), (d.power_down, False)):
            if not names:
                continue
            what = "up" if up else "down"
            if self.dry_run:
                log.info("power (dry run): would power %s %s: %s", what, ",".join(names), d.reason)
                continue
            try:
                self.backend.set_power(list(names), up)
            except SlurmError as e:
                out.failed.append(f"power {what} {','.join(names)}: {e}")
                log.warning("power: Slurm refused to power %s %s: %s", what, ",".join(names), e)
                done = done and up
                continue
            log.info("power %s %s (group %s): %s", what, ",".join(names), d.group, d.reason)
            if not up:
                for name in names:
                    self.cycles[name] = self.cycles.get(name, 0) + 1
        return done
