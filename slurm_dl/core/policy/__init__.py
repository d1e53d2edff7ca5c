"""Priority policies behind one interface, and the registry that builds them by name.

>>> get_policy("las", config).order(jobs, ctx)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import DISCIPLINES, PolicyContext, PriorityPolicy, rank_scores, tie_break
from .deadline import deadline_feasible, slack

if TYPE_CHECKING:
    from ..config import SiteConfig

# name -> (module, class, fixed keyword arguments)
_REGISTRY: dict[str, tuple[str, str, dict[str, Any]]] = {
    "fifo": ("fifo", "FifoPolicy", {}),
    "fifo-firstfit": ("fifo", "FifoFirstFitPolicy", {}),
    "fifo-backfill": ("fifo", "FifoBackfillPolicy", {}),
    "sjf": ("oracle", "SjfPolicy", {}),
    "srtf": ("oracle", "SrtfPolicy", {}),
    "las": ("las", "LasPolicy", {}),
    "las-tiresias": ("las", "TiresiasLasPolicy", {}),
    "gittins": ("gittins", "GittinsPolicy", {}),
    "qssf": ("qssf", "QssfPolicy", {}),
    "fairshare": ("fairshare_lease", "FairShareLeasePolicy", {}),
    "fairshare-queue": ("fairshare", "FairSharePolicy", {}),
    "deadline": ("deadline", "DeadlinePolicy", {}),
    "class": ("job_class", "ClassPolicy", {}),
    "combined": ("combined", "CombinedPolicy", {}),
}


def policy_names() -> list[str]:
    """Every name :func:`get_policy` accepts."""
    return list(_REGISTRY)


def register(name: str, module: str, cls: str, **fixed: Any) -> None:
    _REGISTRY[name] = (module, cls, fixed)


def get_policy(name: str, config: "SiteConfig | None" = None, **overrides: Any) -> PriorityPolicy:
    """Build the policy called ``name`` from the site config (defaults when ``None``).

    ``overrides`` replace config values for this instance (e.g. ``thresholds_gpu_s=[...]`` for
    a parameter sweep). Unknown names and unknown overrides raise ``ValueError``.
    """
    try:
        module, cls_name, fixed = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; valid: {', '.join(_REGISTRY)}") from None
    cls = getattr(importlib.import_module(f"{__name__}.{module}"), cls_name)
    kwargs = {**fixed, **overrides}
    try:
        return cls(config, **kwargs)
    except TypeError as e:
        raise ValueError(f"policy {name!r}: bad override(s) {sorted(overrides)}: {e}") from None


__all__ = [
    "DISCIPLINES",
    "PolicyContext",
    "PriorityPolicy",
    "deadline_feasible",
    "slack",
    "get_policy",
    "policy_names",
    "rank_scores",
    "register",
    "tie_break",
]
