"""get_backend and the pyslurm guard (never imports pyslurm where it would abort the process)."""

from __future__ import annotations

import importlib.util

import pytest

from slurm_dl.core.errors import SlurmNotInstalledError
from slurm_dl.slurm import CliBackend, SlurmBackend, get_backend
from slurm_dl.slurm.pyslurm_backend import pyslurm_unavailable_reason


def test_cli_is_the_default_and_satisfies_the_protocol():
    backend = get_backend()
    assert isinstance(backend, CliBackend) and isinstance(backend, SlurmBackend) and backend.name == "cli"


def test_unknown_backend_name():
    with pytest.raises(ValueError, match="allowed: cli, pyslurm"):
        get_backend("slurmrestd")


def test_pyslurm_guard_without_slurm_conf(tmp_path):
    reason = pyslurm_unavailable_reason({"SLURM_CONF": str(tmp_path / "missing.conf")})
    assert reason is not None
    if importlib.util.find_spec("pyslurm") is not None:
        assert "slurm.conf" in reason


@pytest.mark.skipif(importlib.util.find_spec("pyslurm") is not None, reason="pyslurm is installed here")
def test_pyslurm_missing_is_a_clear_error():
    with pytest.raises(SlurmNotInstalledError, match="pyslurm is not installed"):
        get_backend("pyslurm")
