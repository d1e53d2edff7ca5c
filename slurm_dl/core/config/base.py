"""What every section of the site config is built from: the number fields with their finite
ranges, and the strict model (unknown keys, inf, nan and control characters refused)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


# Upper ends of the ranges, named once.
MINUTES_PER_YEAR = 525_600
SECONDS_PER_DAY = 86_400
SECONDS_PER_30_DAYS = 30 * SECONDS_PER_DAY
MAX_WEIGHT = 1e6
MAX_GPU_S = 1e12  # service and predictions, in (GPU-)seconds: far beyond any real job


def num(
    default: Any = ...,
    *,
    le: float,
    gt: float | None = None,
    ge: float | None = None,
    description: str | None = None,
) -> Any:
    """A number field: finite (the models refuse inf and nan), no booleans or strings, inside
    ``[ge or gt, le]``. Every numeric key of the site config is declared with this."""
    return Field(default, gt=gt, ge=ge, le=le, strict=True, description=description)


def bounded(kind: type, *, le: float, gt: float | None = None, ge: float | None = None) -> Any:
    """The same rule for the items of a list or the values of a table."""
    return Annotated[kind, Field(gt=gt, ge=ge, le=le, strict=True)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _printable(cls, v: Any) -> Any:
        """Names, paths and URLs end up in Slurm commands, file names and log lines: no control
        characters (a NUL in a path would make every later open() fail)."""
        items = v if isinstance(v, list) else v.keys() if isinstance(v, dict) else [v]
        for s in items:
            if isinstance(s, str) and any(ord(c) < 32 or ord(c) == 127 for c in s):
                raise ValueError("control characters (newline, tab, NUL …) are not allowed")
        return v
