"""Read the gpu-agents' exposition files (one ``<node>.prom`` per node) for the prioritizer."""

from __future__ import annotations

import logging
from pathlib import Path

from .exposition import parse
from .samples import JobGpuSample

log = logging.getLogger("slurm_dl.telemetry")


def read_exposition_dir(directory: str | Path) -> list[JobGpuSample]:
    """Every sample in ``directory/*.prom``; an unreadable file is logged and skipped, a missing dir is empty."""
    out: list[JobGpuSample] = []
    d = Path(directory)
    if not d.is_dir():
        return out
    for path in sorted(d.glob("*.prom")):
        try:
            out.extend(parse(path.read_text()))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            log.warning("telemetry: skipping %s: %s", path, e)
    return out
