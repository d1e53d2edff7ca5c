"""Recognising slurm-dl's own services among a testbed's processes, by command line."""

from __future__ import annotations

import pytest

from slurm_dl.testbed.cluster import Recovery
from slurm_dl.testbed.services import describe, service_name


@pytest.mark.parametrize(
    "argv, name",
    [
        (
            ["/usr/bin/python3", "/venv/bin/slurm-dl", "filter", "serve", "--socket", "/x/f.sock"],
            "filter",
        ),
        (["slurm-dl", "prioritizer", "run"], "prioritizer"),
        (
            [
                "/usr/bin/python3",
                "-m",
                "slurm_dl.cli.main",
                "prioritizer",
                "run",
                "--config",
                "a.toml",
            ],
            "prioritizer",
        ),
        (["/usr/bin/python3", "-m", "slurm_dl.cli.main", "filter", "serve"], "filter"),
        (["slurm-dl", "prioritizer", "once"], None),
        (["slurm-dl", "filter", "check", "--", "--gpus=1"], None),
        (["/usr/sbin/slurmctld", "-D", "-f", "/x/slurm.conf"], None),
        (["scontrol", "update", "jobid=1", "SiteFactor=5"], None),
        (["bash", "-c", "echo filter serve"], None),
        ([], None),
    ],
)
def test_service_name(argv, name) -> None:
    assert service_name(argv) == name


def test_messages_name_the_services_and_their_pids() -> None:
    assert (
        describe({"filter": 12, "prioritizer": None})
        == "filter service pid 12, prioritizer not running"
    )
    r = Recovery(("slurmctld",), {"filter": 12, "prioritizer": 34})
    assert r.message().splitlines() == [
        "slurmctld had stopped: restarted the Slurm daemons",
        "(jobs that were running on the testbed were stopped)",
        "left running: filter service pid 12, prioritizer pid 34",
    ]
    assert r.to_dict() == {
        "dead": ["slurmctld"],
        "services_left_running": {"filter": 12, "prioritizer": 34},
    }
    assert "no slurm-dl service" in Recovery(("slurmd-gpu01",), {"filter": None}).message()
    assert all(len(line) <= 80 for line in r.message().splitlines())
