"""The only place slurm-dl talks to Slurm: backends behind one protocol.

backend = get_backend()          # CliBackend (Slurm's own commands), the default
snap = backend.snapshot()
backend.set_site_factor({123: 500, 124: 500})   # one scontrol call per distinct value
"""

from __future__ import annotations

from typing import Any, Mapping, get_args

from ..core.config.slurm import BackendName

from .cli_backend import CliBackend
from .parse import (
    parse_gpu_request,
    parse_partitions,
    parse_sinfo_json,
    parse_squeue_json,
    parse_topology,
)
from .protocol import PendingSize, SiteFactorResult, SlurmBackend
from .runner import classify_failure, run_slurm

BACKENDS: tuple[str, ...] = get_args(BackendName)  # one owner: [slurm] backend's values


def get_backend(
    name: str = "cli", env: Mapping[str, str] | None = None, **options: Any
) -> SlurmBackend:
    """A backend by name: ``cli`` (default) or ``pyslurm`` (optional extra, imported lazily).
    ``options``: the CLI reader's (``timeout``, ``topology_ttl_s``; pyslurm's CLI half takes them)."""
    key = name.strip().lower()
    if key == "cli":
        return CliBackend(env, **options)
    if key == "pyslurm":
        from .pyslurm_backend import PyslurmBackend

        return PyslurmBackend(env, **options)
    raise ValueError(f"unknown Slurm backend {name!r}; allowed: {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "CliBackend",
    "PendingSize",
    "SiteFactorResult",
    "SlurmBackend",
    "classify_failure",
    "get_backend",
    "parse_gpu_request",
    "parse_partitions",
    "parse_sinfo_json",
    "parse_squeue_json",
    "parse_topology",
    "run_slurm",
]
