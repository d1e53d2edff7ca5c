"""``[elastic]``: how the elastic planner sizes jobs that run on a range of GPUs."""

from __future__ import annotations

from .base import SECONDS_PER_DAY, Strict, num


class ElasticConfig(Strict):
    """``[elastic]``: the settings of the elastic planner (slurm_dl.core.elastic)."""

    resize_cost_s: float = num(
        150.0,
        ge=0,
        le=SECONDS_PER_DAY,
        description="seconds a resize costs a job (checkpoint, requeue delay, "
        "restart) until the ledger has measured it; Slurm's requeue delay alone is "
        "about 120 s",
    )
    min_resize_interval_s: float = num(
        900.0,
        ge=0,
        le=SECONDS_PER_DAY,
        description="a job that started or was resized this recently is not grown "
        "again (a shrink that lets waiting work start is not held back)",
    )
    min_gain_per_gpu: float = num(
        0.1,
        ge=0,
        le=1,
        description="grow a job only where each added GPU adds at least this much "
        "of one GPU's work (1: perfect scaling)",
    )
