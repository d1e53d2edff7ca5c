"""``[simulate]``: defaults of the what-if replays run as a Slurm job array."""

from __future__ import annotations

from pydantic import Field

from .base import Strict, num


class SimulateConfig(Strict):
    """Defaults of `slurm-dl simulate --via-slurm` (the replays as one Slurm job array)."""

    partition: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="the array's partition (CPU-only tasks); unset: Slurm's default partition",
    )
    time_minutes: int = num(60, ge=1, le=30 * 24 * 60, description="each replay task's time limit")
