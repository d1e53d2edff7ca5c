"""The switch tree as the filter rules take it (leaf switches' node lists), read from Slurm."""

from __future__ import annotations

from ..core.config import SiteConfig
from ..core.errors import SlurmDLError


def slurm_leaf_nodes(
    config: SiteConfig, timeout: float = 5.0
) -> tuple[tuple[str, ...], ...] | None:
    """The leaf switches' nodes from ``scontrol show topology`` when the site takes its tree from
    Slurm and Slurm answers; else None (the rules then ask for no switches, as the live filter
    does until it has read the tree)."""
    if config.topology.source != "slurm":
        return None
    from .cli_backend import CliBackend

    try:
        return CliBackend(timeout=timeout).topology().leaf_nodes()
    except (SlurmDLError, OSError):
        return None
