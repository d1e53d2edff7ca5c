"""``--backend``: the Slurm backend a command uses, over ``[slurm] backend`` of the site config.

The filter service, the prioritizer, doctor and explain all build theirs here, through the one
door (:func:`slurm_dl.slurm.get_backend`), so one setting picks it for all of them.
"""

from __future__ import annotations

from typing import Any, Optional, get_args

import typer

from ..core.config import BackendName, SiteConfig, SlurmConfig

BACKENDS: tuple[str, ...] = get_args(BackendName)  # the names slurm_dl.slurm.get_backend builds


def _checked(value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    name = value.strip().lower()
    if name not in BACKENDS:
        raise typer.BadParameter(f"got {value!r}; allowed: {', '.join(BACKENDS)}")
    return name


BackendOpt = typer.Option(
    None,
    "--backend",
    callback=_checked,
    help='how to talk to Slurm: "cli" (its commands) or "pyslurm" '
    "(default: backend in [slurm] of the site config, else cli)",
    show_default=False,
)


def backend_name(cfg: Optional[SiteConfig], flag: Optional[str]) -> str:
    """The flag where given, else the site config's ``[slurm] backend`` (else ``cli``)."""
    if flag is not None:
        return flag
    return (cfg.slurm if cfg is not None else SlurmConfig()).backend


def build_backend(cfg: Optional[SiteConfig], flag: Optional[str], **options: Any):
    """The backend ``backend_name`` names, with the reader's ``options`` (``timeout``,
    ``topology_ttl_s``); a pyslurm that is missing or built for another release is a
    :class:`~slurm_dl.core.errors.SlurmNotInstalledError` that says which and how to build it."""
    from ..slurm import get_backend

    return get_backend(backend_name(cfg, flag), **options)
