"""A testbed of two GPU types against a real Slurm (`slurm-dl testbed up --gpus h100:2x8,v100:2x8`):
every way a job can choose a type (typed GRES, a feature constraint, a partition, a list of
partitions) lands on that type, a typed request waits for its type rather than spill over,
and root can re-target a pending job's partitions, the lever a prioritizer steers with."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Iterator

import pytest

from slurm_dl.core.errors import SlurmError
from slurm_dl.testbed import Testbed, job_fields, submit, wait_for_job_state
from slurm_dl.testbed.client import run_client

from conftest import TEST_SLURM, require_testbed_support

SPEC = "h100:2x8,v100:2x8"
H100, V100 = {"gpu01", "gpu02"}, {"gpu03", "gpu04"}
CLI = [sys.executable, "-m", "slurm_dl.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """The mixed testbed, started the way users start it: the command line."""
    require_testbed_support()
    state = tmp_path_factory.mktemp("mixed") / "tb"
    up = cli(
        "testbed",
        "up",
        "--dir",
        str(state),
        "--gpus",
        SPEC,
        *(["--slurm", TEST_SLURM] if TEST_SLURM else []),
    )
    tb = Testbed(state)
    try:
        assert up.returncode == 0, up.stderr
        assert "4 nodes (2 x 8 h100, 2 x 8 v100 GPUs)" in up.stdout, up.stdout
        yield tb
    finally:
        tb.down()


def sh(tb: Testbed, *argv: str) -> str:
    return run_client(list(argv), tb.env())


def job(tb: Testbed, *args: str, script: str = "#!/bin/bash\ntrue\n") -> int:
    return submit(script, tb.env(), ["--output=/dev/null", *args])


def update_partition(tb: Testbed, job_id: int, value: str) -> int:
    """``scontrol update JobId=N Partition=VALUE``; returns the tries it took. Slurm 24.11 and
    26.05 without slurmdbd refuse it at random with a stale errno, EAGAIN ("Resource temporarily
    unavailable"; docs/releases.md): those are retried, anything else is raised."""
    for attempt in range(1, 31):
        try:
            sh(tb, "scontrol", "update", f"JobId={job_id}", f"Partition={value}")
            return attempt
        except SlurmError as e:
            if "temporarily unavailable" not in str(e):
                raise
            time.sleep(0.05)
    raise AssertionError(f"scontrol update JobId={job_id} Partition={value}: EAGAIN 30 times")


def test_cli_status_env_and_site_config(mixed: Testbed) -> None:
    status = cli("testbed", "status", "--dir", str(mixed.state_dir), "--json")
    assert status.returncode == 0, status.stderr
    assert sorted(json.loads(status.stdout)["nodes"]) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert json.loads(status.stdout)["gpus"] == SPEC
    assert (
        f"gpus             {SPEC}" in cli("testbed", "status", "--dir", str(mixed.state_dir)).stdout
    )
    env = cli("testbed", "env", "--dir", str(mixed.state_dir)).stdout
    assert f"export SLURM_CONF={mixed.slurm_conf}" in env and "SLURM_DL_CONFIG=" in env
    check = cli(
        "config", "check", str(mixed.layout.site_config), "--slurm-conf", str(mixed.slurm_conf)
    )
    assert check.returncode == 0 and "2 node group(s), 32 GPUs (h100, v100)" in check.stdout, (
        check.stdout
    )
    assert f"matches {mixed.slurm_conf}: 4 node(s)" in check.stdout, (
        check.stdout
    )  # its own site.toml
    # up again: the same shape is a no-op, another shape is refused while it runs
    again = cli("testbed", "up", "--dir", str(mixed.state_dir), "--gpus", SPEC)
    assert again.returncode == 0, again.stderr
    other = cli("testbed", "up", "--dir", str(mixed.state_dir), "--gpus", "h100:2x8,v100:2x4")
    assert (
        other.returncode == 1
        and "already up with" in other.stderr
        and "testbed down" in other.stderr
    )


def test_sinfo_shows_both_types_with_their_counts_features_and_partitions(mixed: Testbed) -> None:
    nodes: dict[str, tuple[str, str, set[str]]] = {}
    for line in sh(mixed, "sinfo", "-h", "-N", "-o", "%N|%G|%f|%R").splitlines():
        name, gres, features, partition = line.split("|")
        prev = nodes.get(name, (gres, features, set()))
        nodes[name] = (gres, features, prev[2] | {partition})
    assert nodes == {
        **{n: ("gpu:h100:8", "h100", {"gpu", "h100"}) for n in H100},
        **{n: ("gpu:v100:8", "v100", {"gpu", "v100"}) for n in V100},
    }
    parts = dict(line.split("|") for line in sh(mixed, "sinfo", "-h", "-o", "%R|%D").splitlines())
    assert parts == {"gpu": "4", "h100": "2", "v100": "2"}
    topo = sh(mixed, "scontrol", "show", "topology")
    assert "SwitchName=leaf1" in topo and "Nodes=gpu[01-02]" in topo and "Nodes=gpu[03-04]" in topo


def test_each_way_of_choosing_a_type_lands_on_it(mixed: Testbed) -> None:
    asks = {
        "typed gres v100": (["--gres=gpu:v100:1"], V100, None),
        "typed gpus h100": (["--gpus=h100:2"], H100, None),
        "constraint h100": (["--constraint=h100", "--gpus=1"], H100, None),
        "partition v100": (["-p", "v100", "--gpus=1"], V100, "v100"),
        "two partitions": (["-p", "h100,v100", "--gpus=1"], H100 | V100, None),
    }
    ids = {name: job(mixed, *args) for name, (args, _, _) in asks.items()}
    for name, (_, where, partition) in asks.items():
        fields = wait_for_job_state(ids[name], mixed.env(), ["COMPLETED"], timeout=30)
        assert fields["NodeList"] in where, (name, fields["NodeList"])
        if partition:
            assert fields["Partition"] == partition, (name, fields["Partition"])
    # the two-partition job ran in one of them, and on that partition's nodes
    two = job_fields(ids["two partitions"], mixed.env())
    assert two["Partition"] in ("h100", "v100")
    assert two["NodeList"] in (H100 if two["Partition"] == "h100" else V100)


def test_typed_gres_waits_for_its_type_while_others_take_the_free_one(mixed: Testbed) -> None:
    blocker = job(
        mixed, "-p", "h100", "-N2", "--gpus-per-node=8", script="#!/bin/bash\nsleep 300\n"
    )
    try:
        wait_for_job_state(blocker, mixed.env(), ["RUNNING"], timeout=30)
        typed = job(mixed, "--gres=gpu:h100:1")
        either = job(mixed, "-p", "h100,v100", "--gpus=1")
        untyped = job(mixed, "--gpus=1")
        for j in (either, untyped):
            fields = wait_for_job_state(j, mixed.env(), ["COMPLETED"], timeout=30)
            assert fields["NodeList"] in V100, fields["NodeList"]
        assert job_fields(either, mixed.env())["Partition"] == "v100"
        time.sleep(4.5)  # two more scheduling passes (sched_interval = bf_interval = 2 s)
        waiting = job_fields(typed, mixed.env())
        assert waiting["JobState"] == "PENDING", waiting
    finally:
        sh(mixed, "scancel", str(blocker))
    fields = wait_for_job_state(typed, mixed.env(), ["COMPLETED"], timeout=30)
    assert fields["NodeList"] in H100, fields["NodeList"]


def test_root_retargets_a_pending_jobs_partitions(mixed: Testbed) -> None:
    held = job(mixed, "-H", "-p", "h100", "--gpus=1")
    update_partition(mixed, held, "v100")
    assert job_fields(held, mixed.env())["Partition"] == "v100"
    update_partition(mixed, held, "h100,v100")
    assert sh(mixed, "squeue", "-h", "-j", str(held), "-o", "%P").strip() == "h100,v100"
    update_partition(mixed, held, "v100")
    sh(mixed, "scontrol", "release", str(held))
    fields = wait_for_job_state(held, mixed.env(), ["COMPLETED"], timeout=30)
    assert fields["Partition"] == "v100" and fields["NodeList"] in V100
    # once it runs, its partition is fixed
    running = job(mixed, "-p", "v100", "--gpus=1", script="#!/bin/bash\nsleep 300\n")
    try:
        wait_for_job_state(running, mixed.env(), ["RUNNING"], timeout=30)
        with pytest.raises(SlurmError, match="no longer pending"):
            sh(mixed, "scontrol", "update", f"JobId={running}", "Partition=h100")
    finally:
        sh(mixed, "scancel", str(running))
