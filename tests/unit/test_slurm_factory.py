"""get_backend and the pyslurm guard (never imports pyslurm where it would abort the process)."""

from __future__ import annotations

import importlib.util

import pytest

from slurm_dl.core.errors import SlurmNotInstalledError
from slurm_dl.slurm import CliBackend, SlurmBackend, get_backend
from slurm_dl.slurm.pyslurm_backend import pyslurm_unavailable_reason


def test_cli_is_the_default_and_satisfies_the_protocol():
    backend = get_backend()
    assert (
        isinstance(backend, CliBackend)
        and isinstance(backend, SlurmBackend)
        and backend.name == "cli"
    )


def test_unknown_backend_name():
    with pytest.raises(ValueError, match="allowed: cli, pyslurm"):
        get_backend("slurmrestd")


def test_pyslurm_guard_without_slurm_conf(tmp_path):
    reason = pyslurm_unavailable_reason({"SLURM_CONF": str(tmp_path / "missing.conf")})
    assert reason is not None
    if importlib.util.find_spec("pyslurm") is not None:
        assert "slurm.conf" in reason


@pytest.mark.skipif(
    importlib.util.find_spec("pyslurm") is not None, reason="pyslurm is installed here"
)
def test_pyslurm_missing_is_a_clear_error():
    with pytest.raises(SlurmNotInstalledError, match="pyslurm is not installed"):
        get_backend("pyslurm")


def test_both_backends_have_every_member_the_protocol_names():
    """The daemons take any backend get_backend gives: each one has the whole protocol (the
    pyslurm one may not be importable here, so its class is read, not built)."""
    from slurm_dl.slurm.pyslurm_backend import PyslurmBackend

    names = [n for n, v in vars(SlurmBackend).items() if not n.startswith("_") and callable(v)]
    names += list(SlurmBackend.__annotations__)
    assert {"call_s", "gpu_allocations", "set_nodes", "slurm_release", "snapshot"} <= set(names)
    cli = get_backend()
    assert not [n for n in names if not hasattr(cli, n)]
    assert not [n for n in names if n != "name" and not hasattr(PyslurmBackend, n)]
    assert PyslurmBackend.name == "pyslurm"


def test_get_backend_hands_the_readers_options_on():
    backend = get_backend("cli", topology_ttl_s=60.0, timeout=5.0)
    assert backend.topology_ttl_s == 60.0 and backend.timeout == 5.0
