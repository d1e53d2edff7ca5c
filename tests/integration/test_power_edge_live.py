"""The Slurm edge of power saving against a live testbed with Slurm's power saving on: a node
powered down and up again through the backend, and a reservation's nodes read back."""

from __future__ import annotations

import subprocess
import time

from slurm_dl.core.power import Power
from slurm_dl.slurm.cli_backend import CliBackend
from slurm_dl.slurm.power import node_power

from polling import wait_until

# Slurm's own idle timer kept off every node: only the backend's updates power them.
NO_IDLE_TIMER = ("SuspendExcNodes=gpu[01-02]",)


def test_power_down_up_and_reserved_nodes(make_testbed) -> None:
    tb = make_testbed(nodes=2, gpus_per_node=2, power_save=True, extra_conf=NO_IDLE_TIMER)
    tb.up()
    env = tb.env()
    backend = CliBackend(env)

    def power_of(name: str) -> Power:
        return {n.name: node_power(n) for n in backend.nodes()}[name]

    assert power_of("gpu02") is Power.ON
    backend.set_power(["gpu02"], up=False)
    wait_until("gpu02 powered down", lambda: power_of("gpu02") is Power.OFF, timeout=60)
    assert power_of("gpu01") is Power.ON  # the other node untouched
    backend.set_power(["gpu02"], up=True)
    wait_until("gpu02 powered up", lambda: power_of("gpu02") is Power.ON, timeout=90)

    subprocess.run(
        ["scontrol", "create", "reservation", "ReservationName=maint", "StartTime=now+600",
         "Duration=10", "Nodes=gpu01", "Users=root"],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    now = time.time()
    assert backend.reserved_nodes(now, 3600) == {"gpu01"}
    assert backend.reserved_nodes(now, 60) == set()
