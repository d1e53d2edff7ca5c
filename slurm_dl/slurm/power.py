"""Slurm's side of node power saving (pure): a node's power state from its state flags, the
``scontrol update`` that powers nodes up or down, and the nodes reservations hold.

Checked on 22.05: ``scontrol update NodeName=a,b State=POWER_DOWN`` (or
``POWER_UP``) works while ``SuspendTime`` is set, even for nodes in ``SuspendExcNodes`` (which
only keeps Slurm's own idle timer off them); with ``SuspendTime=INFINITE`` Slurm refuses both
("Invalid node state specified"). A node's flags then read ``POWERING_DOWN`` (or
``POWER_DOWN`` while a job still runs on it), ``POWERED_DOWN``, ``POWERED_DOWN+POWER_UP`` or
``POWERING_UP`` while it boots, and nothing once it is up. A ``POWER_UP`` of a node still
``POWERING_DOWN`` is taken and then ignored: power up only nodes that are ``POWERED_DOWN``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime

from ..core.hostlist import expand_hostlist
from ..core.model import Node
from ..core.power import Power

_BOOTING = ("POWERING_UP", "POWER_UP")
_STOPPING = ("POWERING_DOWN", "POWER_DOWN")
_NODE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def node_power(node: Node) -> Power:
    """The power state Slurm reports for ``node`` (from ``Node.state``, ``IDLE+POWERED_DOWN``)."""
    words = set(node.state.upper().split("+"))
    if words & set(_BOOTING):
        return Power.BOOTING
    if "POWERED_DOWN" in words:
        return Power.OFF
    if words & set(_STOPPING):
        return Power.STOPPING
    return Power.ON


def node_allocated(node: Node) -> bool:
    """Slurm counts ``node`` as holding a job (``ALLOCATED``, ``MIXED`` or ``COMPLETING``)."""
    return bool(set(node.state.upper().split("+")) & {"ALLOCATED", "MIXED", "COMPLETING"})


def power_update_argv(nodes: Sequence[str], up: bool) -> list[str]:
    """``scontrol update NodeName=a,b State=POWER_UP|POWER_DOWN``; a bad name is a ValueError."""
    if not nodes:
        raise ValueError("power update: no nodes")
    for name in nodes:
        if not _NODE_NAME.match(name):
            raise ValueError(f"power update: bad node name {name!r}")
    state = "POWER_UP" if up else "POWER_DOWN"
    return ["scontrol", "update", f"NodeName={','.join(nodes)}", f"State={state}"]


def _fields(line: str) -> dict[str, str]:
    out = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep:
            out[key] = value
    return out


def _epoch(text: str | None) -> float | None:
    """``2026-12-07T23:40:00`` (slurmctld's local time, as scontrol prints it) -> epoch."""
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def reserved_nodes(show_reservation: str, now: float, within_s: float) -> set[str]:
    """Nodes of reservations (``scontrol -o show reservation``, one a line) that are active
    now or start within ``within_s`` seconds: not to be powered down."""
    held: set[str] = set()
    for line in show_reservation.splitlines():
        f = _fields(line)
        if "ReservationName" not in f:
            continue  # "No reservations in the system"
        start, end = _epoch(f.get("StartTime")), _epoch(f.get("EndTime"))
        if end is not None and end <= now:
            continue
        if start is not None and start > now + within_s:
            continue
        held.update(_expand(f.get("Nodes")))
    return held


def _expand(expr: str | None) -> Iterable[str]:
    if not expr or expr == "(null)":
        return ()
    try:
        return expand_hostlist(expr)
    except ValueError:
        return ()
