"""``[throughput]``: what the throughput model knows beyond each GPU type's speed."""

from __future__ import annotations

from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

from .base import Strict, num
from .side_files import read_matrix_csv, side_file_path


class ThroughputConfig(Strict):
    """``[throughput]``: what the throughput model (slurm_dl.core.throughput) knows beyond each
    type's ``[[gpu_types]] speed``."""

    matrix: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="CSV "
        "kind,TYPE1,TYPE2,...: relative throughput of each job kind (model, job "
        "class, or * for any) on each GPU type (a relative path is taken from the "
        "config file's folder); unset: the types' speeds alone",
    )
    min_samples: int = num(
        3,
        ge=1,
        le=1000,
        description="runs per GPU type of one user and job name before "
        "a speedup learnt from history is used",
    )
    _rows: dict | None = PrivateAttr(default=None)

    @property
    def matrix_rows(self) -> dict[str, dict[str, float]] | None:
        """The matrix read at load ({kind: {type: throughput}}), or None."""
        return self._rows

    @model_validator(mode="after")
    def _read_matrix(self, info: ValidationInfo) -> "ThroughputConfig":
        if self.matrix is not None:  # read at load, so a bad file fails here with its line
            self._rows = read_matrix_csv(side_file_path(self.matrix, info))
        return self
