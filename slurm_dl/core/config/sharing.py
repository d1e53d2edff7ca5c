"""``[sharing]``: node groups that offer parts of GPUs (shards, MPS) and the jobs sent there."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from ..model import JobClass
from .base import Strict, num


class SharingGroup(Strict):
    """One node group whose GPUs are offered in parts: Slurm ``shard`` GRES and/or MPS."""

    node_group: str = Field(description="a [[node_groups]] name (a group with GPUs)")
    shards_per_gpu: int | None = num(
        None,
        ge=1,
        le=128,
        description="shards each GPU offers "
        "(GresTypes=gpu,shard; gres.conf Name=shard); unset: no shards",
    )
    mps_percent: float | None = num(
        None,
        gt=0,
        le=100,
        description="the compute share one job gets on MPS, in percent of a GPU; unset: no MPS",
    )
    shard_memory_gb: float | None = num(
        None,
        gt=0,
        le=100_000,
        description="GPU memory one shard guarantees (the agent names a job over it)",
    )

    @model_validator(mode="after")
    def _offers_something(self) -> "SharingGroup":
        if self.shards_per_gpu is None and self.mps_percent is None:
            raise ValueError(
                f"node group {self.node_group!r}: set shards_per_gpu and/or mps_percent"
            )
        return self


class SharingConfig(Strict):
    """Small jobs share GPUs: which node groups offer parts of GPUs, and which jobs go there."""

    groups: list[SharingGroup] = Field(
        default_factory=list,
        max_length=1000,
        description="the node groups whose GPUs are offered in parts; none: no sharing",
    )
    classes: list[JobClass] = Field(
        default_factory=lambda: [JobClass.INFERENCE, JobClass.INTERACTIVE],
        max_length=16,
        description="classes whose 1-GPU jobs are routed to shards (training never is)",
    )

    suggest_after_runs: int = num(
        3,
        ge=0,
        le=100,
        description="a user's job is told a shard would do "
        "when this many of its name's last runs each used a small part of one "
        "whole GPU (0: never)",
    )
    suggest_max_fraction: float = num(
        0.25,
        gt=0,
        le=1,
        description="a small part: at most this fraction "
        "of the GPU's compute (mean) and memory (peak)",
    )

    @field_validator("classes")
    @classmethod
    def _no_training(cls, v: list[JobClass]) -> list[JobClass]:
        if JobClass.TRAIN in v:
            raise ValueError(
                "train cannot share GPUs; allowed: "
                + ", ".join(c.value for c in JobClass if c is not JobClass.TRAIN)
            )
        return v
