"""Slurm's side of power saving: power states from node flags, the update, reservations."""

from __future__ import annotations

from datetime import datetime

import pytest

from slurm_dl.core.model import Node
from slurm_dl.core.power import Power
from slurm_dl.slurm.power import node_power, power_update_argv, reserved_nodes


@pytest.mark.parametrize(
    "state, power",
    [
        ("IDLE", Power.ON),
        ("MIXED", Power.ON),
        ("IDLE+POWERED_DOWN", Power.OFF),
        ("IDLE+POWERING_DOWN", Power.STOPPING),
        ("ALLOCATED+POWER_DOWN", Power.STOPPING),
        ("IDLE+POWER_UP+POWERED_DOWN", Power.BOOTING),
        ("IDLE+POWERING_UP", Power.BOOTING),
        ("DOWN+NOT_RESPONDING", Power.ON),
    ],
)
def test_node_power_from_flags(state: str, power: Power) -> None:
    assert node_power(Node(name="gpu01", gpus=8, state=state)) is power


def test_power_update_argv() -> None:
    assert power_update_argv(["gpu03", "gpu04"], up=False) == [
        "scontrol",
        "update",
        "NodeName=gpu03,gpu04",
        "State=POWER_DOWN",
    ]
    assert power_update_argv(["gpu01"], up=True)[-1] == "State=POWER_UP"
    with pytest.raises(ValueError, match="bad node name"):
        power_update_argv(["gpu01 State=DOWN"], up=True)
    with pytest.raises(ValueError, match="no nodes"):
        power_update_argv([], up=True)


def _at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


RESERVATIONS = (
    "ReservationName=now StartTime=2026-12-07T10:00:00 EndTime=2026-12-07T14:00:00 "
    "Duration=04:00:00 Nodes=gpu[01-02] NodeCnt=2 CoreCnt=64 Features=(null) "
    "PartitionName=(null) Flags=MAINT State=ACTIVE\n"
    "ReservationName=soon StartTime=2026-12-07T12:30:00 EndTime=2026-12-07T13:00:00 "
    "Duration=00:30:00 Nodes=gpu03 NodeCnt=1 State=INACTIVE\n"
    "ReservationName=later StartTime=2026-12-08T12:00:00 EndTime=2026-12-08T13:00:00 "
    "Duration=01:00:00 Nodes=gpu04 NodeCnt=1 State=INACTIVE\n"
    "ReservationName=over StartTime=2026-12-07T08:00:00 EndTime=2026-12-07T09:00:00 "
    "Duration=01:00:00 Nodes=gpu05 NodeCnt=1 State=INACTIVE\n"
)


def test_reserved_nodes_now_and_soon() -> None:
    now = _at("2026-12-07T12:00:00")
    assert reserved_nodes(RESERVATIONS, now, 3600) == {"gpu01", "gpu02", "gpu03"}
    assert reserved_nodes(RESERVATIONS, now, 60) == {"gpu01", "gpu02"}
    assert reserved_nodes("No reservations in the system\n", now, 3600) == set()
