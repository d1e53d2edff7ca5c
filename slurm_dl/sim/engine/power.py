"""Node power states in a replay: what each node draws, when it is powered down, and what a
job waits when it lands on a node that is not up (``--power-save``).

A node is on, booting, shutting down or off (the core's :class:`~slurm_dl.core.power.Power`).
Placement sees every node, as Slurm's does under power saving: a job is placed on powered
nodes where it fits there, and otherwise on powered-down ones, which it powers up (Slurm's
ResumeProgram); it then holds its GPUs and waits until its last node is up: the rest of a
boot, or of a shutdown and then a whole boot. That wait is added to the job's run (its end,
and so its completion time, moves by exactly the wait). Three policies:

* ``none``: every node stays on (the schedule is the replay's without ``--power-save``);
* ``fixed:S``: Slurm's SuspendTime: a node idle for S seconds powers down;
* ``predictive``: every ``[power] step_minutes``, the core's forecast and ``decide`` per node
  group (:mod:`.power_plan`): the same code as the live planner.

Energy: a node on and running a job draws ``node_busy_watts`` plus each GPU's busy or idle
draw; on and idle, booting or shutting down: ``node_idle_watts`` plus every GPU idle; off:
``off_watts``. *Idle energy* is what the nodes that run no job draw (idle, booting, shutting
down, off): the part power saving can cut. Energy, GPU-hours and power cycles are counted per
cluster from its first submission to its last (the window in which the trace gives the
demand: after it no work arrives, and an idle drain would flatter power saving; when every
job comes at once, to the last job's end); boot waits, of every job. Times are trace seconds;
the model advances with the engine's events (nothing changes between two of them, so a timer
handled late is handled exactly).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from ...core.config.power import PowerConfig
from ...core.power import Power
from .power_plan import Planner

MODES = ("none", "fixed:SECONDS", "predictive")
_ON, _BOOTING, _STOPPING, _OFF = Power.ON, Power.BOOTING, Power.STOPPING, Power.OFF
_BOOTED, _STOPPED, _IDLE, _STEP, _WINDOW = 0, 1, 2, 3, 4  # timer kinds


@dataclass(frozen=True)
class PowerSave:
    """The power policy of a replay and the site's ``[power]`` settings (plain data)."""

    mode: str = "none"  # none | fixed | predictive
    suspend_s: float = 0.0  # fixed: Slurm's SuspendTime
    cfg: PowerConfig = field(default_factory=PowerConfig)

    @classmethod
    def parse(cls, text: str, cfg: PowerConfig) -> "PowerSave":
        """``none``, ``fixed:SECONDS`` or ``predictive``; ValueError naming the option."""
        t = str(text).strip().lower()
        allowed = f"allowed: {', '.join(MODES)} (SECONDS > 0)"
        if t in ("none", "predictive"):
            return cls(t, 0.0, cfg)
        head, _, rest = t.partition(":")
        if head == "fixed":
            try:
                s = float(rest)
            except ValueError:
                s = math.nan
            if math.isfinite(s) and 0 < s <= 30 * 86400:
                return cls("fixed", s, cfg)
        raise ValueError(f"--power-save: got {text!r}; {allowed}")

    @property
    def label(self) -> str:
        return f"fixed:{self.suspend_s:g}" if self.mode == "fixed" else self.mode


@dataclass(frozen=True)
class NodeSpec:
    """One node of the replayed cluster: its group, GPUs and GPU type."""

    group: int
    gpus: int
    gpu_type: str


class PowerModel:
    """The power state and energy of one cluster's nodes through one replay."""

    def __init__(
        self,
        save: PowerSave,
        nodes: list[NodeSpec],
        groups: list[str],
        origin: float,
        window_end: float | None = None,
    ):
        cfg = save.cfg
        self.save, self.cfg, self.nodes, self.groups = save, cfg, nodes, groups
        n = len(nodes)
        self.state = [_ON] * n
        self.used = [0] * n  # GPUs held by jobs
        self.since = [origin] * n  # energy counted up to here
        self.until = [origin] * n  # a boot or shutdown ends here
        self.resume = [False] * n  # shutting down, with a job waiting: boot right after
        self.idle_ver = [0] * n
        self.cycles = [0] * n  # power-downs today (the predictive budget)
        self.busy = [0] * len(groups)  # nodes holding a job, per group
        self.peak = [0] * len(groups)  # the most of them since the last planner step
        self.not_on = 0
        self._idle_w, self._busy_w, self._gpu_w = [], [], []
        for s in nodes:
            w = cfg.gpu_watts(s.gpu_type)
            self._idle_w.append(cfg.node_idle_watts + s.gpus * w.idle_watts)
            self._busy_w.append(cfg.node_busy_watts + s.gpus * w.idle_watts)
            self._gpu_w.append(w.busy_watts - w.idle_watts)
        self.busy_j = self.idle_j = self.gpu_s = self.off_s = 0.0
        self.downs = self.boots = self.waited = 0
        self.wait_s = 0.0
        self.ready_at: dict[int, float] = {}  # job seq -> when its nodes are all up
        self.timers: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.now = origin
        self.waiting_gpus = 0
        self.plan = None
        self.counted: dict | None = None  # the energy figures at the window's end
        if window_end is not None and window_end > origin:
            self._push(window_end, _WINDOW, -1, 0)
        if save.mode == "fixed":
            for i in range(n):
                self._push(origin + save.suspend_s, _IDLE, i, 0)
        elif save.mode == "predictive":
            self.plan = Planner(self, origin)
            self._push(self.plan.next_step(origin), _STEP, -1, 0)

    # --- time ------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, node: int, ver: int) -> None:
        self._seq += 1
        heapq.heappush(self.timers, (t, self._seq, kind, node, ver))

    def advance(self, now: float, waiting_gpus: int) -> None:
        """Handle the timers due by ``now`` (the engine's next event time); ``waiting_gpus``:
        what the waiting jobs ask for, unchanged since the last event."""
        self.waiting_gpus = waiting_gpus
        timers = self.timers
        while timers and timers[0][0] <= now:
            t, _, kind, i, ver = heapq.heappop(timers)
            self.now = t
            if kind == _BOOTED:
                self._set(i, _ON)
                if not self.used[i]:
                    self._idle(i)
            elif kind == _STOPPED:
                if self.resume[i]:
                    self.resume[i] = False
                    self._boot(i)
                else:
                    self._set(i, _OFF)
            elif kind == _IDLE:
                if ver == self.idle_ver[i] and self.state[i] is _ON and not self.used[i]:
                    self.power_down(i)
            elif kind == _WINDOW:
                self.counted = self._energy()
            else:
                self.plan.step(t)
                self._push(self.plan.next_step(t), _STEP, -1, 0)
        self.now = now

    # --- energy ----------------------------------------------------------------------------
    def _count(self, i: int) -> None:
        """Node ``i``'s draw from its last change to now."""
        t = self.now
        dt = t - self.since[i]
        if dt <= 0:
            return
        self.since[i] = t
        st, used = self.state[i], self.used[i]
        if st is _ON and used:
            self.busy_j += (self._busy_w[i] + used * self._gpu_w[i]) * dt
            self.gpu_s += used * dt
        elif st is _OFF:
            self.idle_j += self.cfg.off_watts * dt
            self.off_s += dt
        else:
            self.idle_j += self._idle_w[i] * dt

    def _set(self, i: int, st: Power) -> None:
        self._count(i)
        self.not_on += (st is not _ON) - (self.state[i] is not _ON)
        self.state[i] = st

    # --- power moves -----------------------------------------------------------------------
    def _idle(self, i: int) -> None:
        """Node ``i`` has just become idle (and is on)."""
        self.idle_ver[i] += 1
        if self.save.mode == "fixed":
            self._push(self.now + self.save.suspend_s, _IDLE, i, self.idle_ver[i])

    def _boot(self, i: int) -> None:
        self._set(i, _BOOTING)
        self.boots += 1
        self.until[i] = self.now + self.cfg.boot_seconds
        self._push(self.until[i], _BOOTED, i, 0)

    def power_up(self, i: int) -> None:
        """Power node ``i`` up (it is off)."""
        if self.state[i] is _OFF:
            self._boot(i)

    def power_down(self, i: int) -> None:
        """Power idle node ``i`` down (it is on)."""
        self._set(i, _STOPPING)
        self.downs += 1
        self.cycles[i] += 1
        self.until[i] = self.now + self.cfg.shutdown_seconds
        self._push(self.until[i], _STOPPED, i, 0)

    def _ready(self, i: int) -> float:
        """When node ``i`` takes jobs, powering it up if it must (a job was placed on it)."""
        st = self.state[i]
        if st is _ON:
            return self.now
        if st is _BOOTING:
            return self.until[i]
        if st is _STOPPING:
            self.resume[i] = True
            return self.until[i] + self.cfg.boot_seconds
        self._boot(i)
        return self.until[i]

    # --- what the engine tells -------------------------------------------------------------
    def took(self, alloc) -> None:
        for i, g in alloc:
            self._count(i)
            if not self.used[i]:
                grp = self.nodes[i].group
                self.busy[grp] += 1
                self.peak[grp] = max(self.peak[grp], self.busy[grp])
            self.used[i] += g

    def gave(self, alloc) -> None:
        for i, g in alloc:
            self._count(i)
            self.used[i] -= g
            if not self.used[i]:
                self.busy[self.nodes[i].group] -= 1
                if self.state[i] is _ON:
                    self._idle(i)

    def delay(self, sj, alloc, now: float) -> None:
        """``sj`` starts on ``alloc`` now: it waits for its nodes to be up (added to its run)."""
        if not self.not_on:
            return
        ready = max(self._ready(i) for i, _ in alloc)
        wait = ready - now
        if wait > 0:
            sj.remaining += wait * sj.speed
            sj.job.duration += wait
            self.ready_at[sj.seq] = ready
            self.wait_s += wait
            self.waited += 1

    def stopped(self, sj, now: float) -> None:
        """``sj`` stops: a wait for a boot not over yet is no longer its work."""
        ready = self.ready_at.pop(sj.seq, None)
        if ready is not None and ready > now:
            left = ready - now
            sj.remaining -= left * sj.speed
            sj.job.duration -= left
            self.wait_s -= left

    def prefer(self, alloc, free: list[int], offset: int, place):
        """``alloc``, or where ``place`` puts the job on the powered nodes alone (``free``:
        a group's free GPUs, its first node ``offset``), as Slurm prefers powered nodes."""
        if not self.not_on:
            return alloc
        state = self.state
        if all(state[i] is _ON for i, _ in alloc):
            return alloc
        masked = [f if state[offset + k] is _ON else 0 for k, f in enumerate(free)]
        better = place(masked)
        if better is None:
            return alloc
        return tuple((offset + k, g) for k, g in better) if offset else better

    def _energy(self) -> dict:
        """The energy and power moves so far (every node counted up to now)."""
        for i in range(len(self.nodes)):
            self._count(i)
        return {
            "busy_j": self.busy_j,
            "idle_j": self.idle_j,
            "gpu_s": self.gpu_s,
            "off_node_s": self.off_s,
            "power_cycles": self.downs,
            "boots": self.boots,
        }

    def close(self, end: float) -> dict:
        """The figures of the replay: the energy and power moves up to the window's end (to
        ``end``, the last job's, without one), the boot waits of every job."""
        self.advance(end, 0)
        counted = self.counted or self._energy()
        return {
            "power_save": self.save.label,
            **counted,
            "boot_wait_jobs": self.waited,
            "boot_wait_s": self.wait_s,
        }


class _Powered:
    """A placer that tells the power model of every take and give, and places a job on the
    powered nodes where it fits there (mixed into the placer's own class)."""

    power: PowerModel

    def take(self, alloc, sj) -> None:
        super().take(alloc, sj)
        self.power.took(alloc)

    def give(self, alloc) -> None:
        super().give(alloc)
        self.power.gave(alloc)

    def place(self, sj, forced: bool = False):
        alloc = super().place(sj, forced)
        if alloc is None or not self.flat:
            return alloc  # several groups: place_in prefers
        return self.power.prefer(
            alloc, self.free, 0, lambda free: self._place(free, sj.gpus, self.per_node)
        )

    def place_in(self, g: int, gpus: int):
        from .placement import place_consolidated

        alloc = super().place_in(g, gpus)
        if alloc is None:
            return None
        per = self.per[g]
        return self.power.prefer(
            alloc, self.gfree[g], self.offset[g], lambda free: place_consolidated(free, gpus, per)
        )


_CLASSES: dict[type, type] = {}


def powered(placer, save: PowerSave, jobs) -> PowerModel:
    """The power model of ``placer``'s nodes, its window ``jobs``' first to last submission;
    ``placer`` is made to tell it (its class becomes the same class with :class:`_Powered`
    mixed in)."""
    subs = [j.submit_time for j in jobs]
    if placer.flat:
        nodes = [NodeSpec(0, placer.per_node, "") for _ in placer.free]
        groups = ["nodes"]
    else:
        nodes = [
            NodeSpec(k, g.gpus_per_node, g.gpu_type)
            for k, g in enumerate(placer.groups)
            for _ in range(g.nodes)
        ]
        groups = [g.name or g.gpu_type for g in placer.groups]
    model = PowerModel(save, nodes, groups, min(subs), max(subs))
    cls = type(placer)
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"Powered{cls.__name__}", (_Powered, cls), {})
    placer.__class__ = _CLASSES[cls]
    placer.power = model
    return model


def summary(parts: list[dict], jobs: int) -> dict:
    """The power figures of a policy's cluster runs (each :meth:`PowerModel.close`'s)."""
    busy = sum(p["busy_j"] for p in parts) / 3.6e6
    idle = sum(p["idle_j"] for p in parts) / 3.6e6
    gpu_h = sum(p["gpu_s"] for p in parts) / 3600
    wait = sum(p["boot_wait_s"] for p in parts)
    return {
        "power_save": parts[0]["power_save"],
        "energy_kwh": busy + idle,
        "idle_energy_kwh": idle,
        "gpu_hours": gpu_h,
        "kwh_per_gpu_hour": (busy + idle) / gpu_h if gpu_h else None,
        "powered_off_node_hours": sum(p["off_node_s"] for p in parts) / 3600,
        "power_cycles": sum(p["power_cycles"] for p in parts),
        "boots": sum(p["boots"] for p in parts),
        "boot_wait_jobs": sum(p["boot_wait_jobs"] for p in parts),
        "boot_wait_s": wait,
        "boot_jct_s_per_job": wait / jobs if jobs else 0.0,
    }
