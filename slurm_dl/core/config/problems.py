"""Validation of parsed TOML into a :class:`SiteConfig`, and its errors as one line per problem:
``key.path: got VALUE; allowed: …`` (a number's whole range at once)."""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from .site_config import SiteConfig


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _constraints_at(loc: tuple[Any, ...]) -> tuple[type | None, dict[str, float]]:
    """The number type and the bounds (``ge``/``gt``/``le``) declared for the key at ``loc``."""
    ann: Any = SiteConfig
    bounds: dict[str, float] = {}
    for part in loc:
        bounds = {}
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            info = ann.model_fields.get(str(part))
            if info is None:
                return None, {}
            ann = info.annotation
            bounds = bounds_of(info.metadata)
            continue
        ann, bounds = unwrap(ann)
        if get_origin(ann) in (list, dict):
            args = get_args(ann)
            ann, bounds = unwrap(args[-1])
    ann, extra = unwrap(ann)
    bounds = bounds or extra
    return (ann if ann in (int, float) else None), bounds


def unwrap(ann: Any) -> tuple[Any, dict[str, float]]:
    """Strip ``Optional`` and ``Annotated``; collect the bounds found on the way."""
    bounds: dict[str, float] = {}
    if get_origin(ann) is Annotated:
        base, *meta = get_args(ann)
        for m in meta:
            bounds.update(bounds_of(getattr(m, "metadata", [m])))
        ann = base
    if get_origin(ann) in (Union, UnionType):
        args = [a for a in get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return unwrap(args[0])[0], bounds
    return ann, bounds


def bounds_of(metadata: list[Any]) -> dict[str, float]:
    """The ``ge``/``gt``/``le`` bounds among a field's metadata."""
    return {
        k: getattr(m, k)
        for m in metadata
        for k in ("ge", "gt", "le")
        if getattr(m, k, None) is not None
    }


def allowed_range(kind: type | None, bounds: dict[str, float]) -> str:
    """``allowed: a number from 0.01 to 87600`` for a number key, else an empty string."""
    if kind is None or "le" not in bounds:
        return ""
    noun = "a whole number" if kind is int else "a finite number"
    if "gt" in bounds:
        return f"allowed: {noun} above {_show(bounds['gt'], kind)} and at most {_show(bounds['le'], kind)}"
    return f"allowed: {noun} from {_show(bounds.get('ge', 0), kind)} to {_show(bounds['le'], kind)}"


def _show(x: float, kind: type) -> str:
    """Whole numbers as written in TOML; very large float bounds as 1e+12."""
    if kind is int or (float(x).is_integer() and abs(x) < 1e7):
        return str(int(x))
    return f"{x:g}"


def _format_errors(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors(include_url=False):
        raw_loc = tuple(x for x in e["loc"] if x not in ("function-after", "function-before"))
        loc = _format_loc(raw_loc)
        value = e.get("input")
        msg = e["msg"].removeprefix("Value error, ")
        allowed = allowed_range(*_constraints_at(raw_loc)) if e["type"] != "value_error" else ""
        if allowed:  # a number of the wrong type or out of range: say the whole range at once
            msg = allowed
        if not raw_loc and e["type"] == "value_error":  # the cross-checks: each names its key
            problems.extend(msg.split("\n"))
        elif e["type"] == "extra_forbidden":
            problems.append(
                f"{loc}: unknown key (check the spelling; see site-configs/ for the allowed keys)"
            )
        elif e["type"] == "missing":
            problems.append(f"{loc}: required key is missing")
        else:
            shown = repr(value)
            if len(shown) > 80:
                shown = shown[:77] + "..."
            problems.append(f"{loc}: got {shown}; {msg}")
    return problems


def parse_config(
    data: dict[str, Any], source: str = "<config>", base_dir: str | Path | None = None
) -> SiteConfig:
    """Validate parsed TOML; files the config names (a Gittins prior) are read from ``base_dir``."""
    try:
        return SiteConfig.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as e:
        raise ConfigError(source, _format_errors(e)) from None
