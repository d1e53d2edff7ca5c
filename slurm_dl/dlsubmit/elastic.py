"""``--gpus`` as dlsubmit takes it: a total (``8``), or for an elastic train job a range
(``8-32``) or a set (``8,16,32``) of totals. An elastic job is submitted at its maximum, with
``dl:elastic=`` in its comment: the filter checks the sizes and tags it, and the prioritizer
may shrink or grow it between them (by checkpoint and requeue)."""

from __future__ import annotations

from typing import Any

from ..core.elastic_sizes import parse_sizes


def gpus_option(kind: str, text: str) -> dict[str, Any]:
    """``{"gpus": total}`` (and ``"elastic": sizes`` for a range or a set); ValueError says why."""
    value = text.strip()
    if value.isdigit():
        return {"gpus": int(value)}
    if value.startswith("-") and value[1:].isdigit():
        return {"gpus": int(value)}  # a negative count: the render says what is wrong
    if kind != "train":
        raise ValueError(f"--gpus {value}: only train jobs are elastic; give a number of GPUs here")
    try:
        sizes = parse_sizes(value)
    except ValueError as e:
        raise ValueError(f"--gpus {value}: {str(e).split(': ', 1)[-1]}") from None
    return {"gpus": sizes.high, "elastic": sizes.text()}
