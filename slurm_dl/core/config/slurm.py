"""``[slurm]``: how slurm-dl talks to Slurm."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Strict

BackendName = Literal["cli", "pyslurm"]


class SlurmConfig(Strict):
    backend: BackendName = Field(
        "cli",
        description="how the filter service, the prioritizer, doctor and explain talk to Slurm: "
        '"cli" (Slurm\'s own commands; every supported release) or "pyslurm" (its library, '
        "for job reads and changes; needs pyslurm built for this Slurm release); "
        "each of those commands' --backend overrides it",
    )
