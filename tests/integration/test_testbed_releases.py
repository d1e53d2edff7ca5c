"""The testbed on the release chosen for this run (SLURM_DL_TEST_SLURM; default the machine's own):
status, env and the clients name it, and the pyslurm backend says clearly when none exists."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from slurm_dl.core.errors import SlurmNotInstalledError
from slurm_dl.slurm import CliBackend, get_backend
from slurm_dl.slurm.pyslurm_backend import PYSLURM_TAGS, pyslurm_unavailable_reason
from slurm_dl.testbed import Testbed

RELEASE = os.environ.get("SLURM_DL_TEST_SLURM") or "22.05"
CLI = [sys.executable, "-m", "slurm_dl.cli.main", "testbed"]


def test_status_env_and_clients_name_the_release(testbed: Testbed) -> None:
    status = subprocess.run(
        [*CLI, "status", "--dir", str(testbed.state_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["slurm"] == RELEASE
    env = subprocess.run(
        [*CLI, "env", "--dir", str(testbed.state_dir)], capture_output=True, text=True, timeout=60
    ).stdout
    assert f"export SLURM_DL_TESTBED_SLURM={RELEASE}\n" in env
    shell = subprocess.run(
        ["bash", "-c", f"{env}\nscontrol version; sinfo -h -o %D"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 0, shell.stderr
    version, nodes = shell.stdout.split("\n")[:2]
    assert RELEASE in version
    assert nodes.strip() == "4"
    assert CliBackend(testbed.env()).slurm_release() == RELEASE


@pytest.mark.skipif(RELEASE in PYSLURM_TAGS, reason=f"pyslurm has a tag for Slurm {RELEASE}")
def test_pyslurm_where_none_exists_is_refused_clearly(testbed: Testbed) -> None:
    reason = pyslurm_unavailable_reason(testbed.env())
    assert (
        reason
        == f"no pyslurm release exists for Slurm {RELEASE}; use the cli backend (the default), which supports it"
    )
    with pytest.raises(
        SlurmNotInstalledError, match=f"no pyslurm release exists for Slurm {RELEASE}"
    ):
        get_backend("pyslurm", env=testbed.env())
