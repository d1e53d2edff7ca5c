"""GPU sharing on a real Slurm (`slurm-dl testbed up --shard-nodes 1 --shards-per-gpu 8`):
the shard node runs eight one-shard jobs at once and tells each its share; a node without
shards and a request for more shards than a node has are refused at submission."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from slurm_dl.core.errors import SlurmError
from slurm_dl.testbed import Testbed, job_fields, submit, wait_for_job_state

from conftest import TEST_SLURM, require_testbed_support

CLI = [sys.executable, "-m", "slurm_dl.cli.main"]


@pytest.fixture(scope="module")
def sharing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    require_testbed_support()
    state = tmp_path_factory.mktemp("shards") / "tb"
    up = subprocess.run(
        [
            *CLI,
            "testbed",
            "up",
            "--dir",
            str(state),
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--shard-nodes",
            "1",
            "--shards-per-gpu",
            "8",
            *(["--slurm", TEST_SLURM] if TEST_SLURM else []),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    tb = Testbed(state)
    try:
        assert up.returncode == 0, up.stderr
        yield tb
    finally:
        tb.down()


def test_eight_one_shard_jobs_run_at_once_on_the_shard_node(
    sharing: Testbed, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    script = (
        f"#!/bin/bash\necho shards=$SLURM_SHARDS_ON_NODE\nwhile [ ! -e {go} ]; do sleep 0.2; done\n"
    )
    outs = [tmp_path / f"n{i}.out" for i in range(8)]
    ids = [submit(script, sharing.env(), ["--gres=shard:1", f"--output={o}"]) for o in outs]
    try:
        for j in ids:  # all eight hold a shard at the same time: none can finish before `go`
            wait_for_job_state(j, sharing.env(), ("RUNNING",), timeout=120)
        assert {job_fields(j, sharing.env())["NodeList"] for j in ids} == {"gpu01"}
    finally:
        go.touch()
    for j in ids:
        wait_for_job_state(j, sharing.env(), ("COMPLETED",), timeout=120)
    assert all(o.read_text().startswith("shards=1") for o in outs)


@pytest.mark.parametrize("args", [["--gres=shard:33"], ["--gres=shard:1", "--nodelist=gpu02"]])
def test_more_shards_than_a_node_has_or_a_node_without_shards_is_refused(
    sharing: Testbed, args
) -> None:
    with pytest.raises(SlurmError, match="Requested node configuration is not available"):
        submit("#!/bin/bash\ntrue\n", sharing.env(), ["--output=/dev/null", *args])
