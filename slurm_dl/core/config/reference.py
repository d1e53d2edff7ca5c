"""Every key of the site config as data, for ``slurm-dl config defaults``: its table, its
description, what it allows (type and range, from the models' own declarations) and its
default as TOML text, so the reference cannot drift from what :func:`parse_config` accepts.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .problems import allowed_range, bounds_of, unwrap
from .site_config import SiteConfig

REQUIRED = "required"
"""``KeyDoc.default`` of a key that has no default."""


@dataclass(frozen=True)
class KeyDoc:
    key: str
    description: str
    allowed: str  # "a whole number from 1 to 64", 'one of "accept", "reject"', ...
    default: str | None  # TOML text; None: unset by default; REQUIRED: no default


@dataclass(frozen=True)
class TableDoc:
    path: str  # dotted, as in the TOML header
    description: str
    array: bool = False  # [[path]]: a list of such tables
    default: str | None = None  # an array's default entries (TOML), when it has some
    keys: list[KeyDoc] = field(default_factory=list)


def reference() -> list[TableDoc]:
    """The site config's tables in file order, each with its keys; sub-tables after their
    parent's keys (as TOML needs them)."""
    out: list[TableDoc] = []
    for name, info in SiteConfig.model_fields.items():
        _table(out, name, info, _default(info))
    return out


def _table(out: list[TableDoc], path: str, info: FieldInfo, value: Any) -> None:
    ann, _ = unwrap(info.annotation)
    model = _model(ann)
    if model is not None:  # [path]
        out.append(TableDoc(path, info.description or ""))
        _fill(out, out[-1], model, value)
        return
    args = get_args(ann)
    if get_origin(ann) is list and args and _model(args[0]) is not None:  # [[path]]
        entries = [_inline(v) for v in value] if value else []
        out.append(
            TableDoc(
                path,
                _describe(info.description, _lengths(info.metadata)),
                array=True,
                default=f"[{', '.join(entries)}]" if entries else None,
            )
        )
        _fill(out, out[-1], _model(args[0]), None)
        return
    if (
        get_origin(ann) is dict and args and _model(args[1]) is not None
    ):  # [path.NAME]: the defaults' names
        out.append(TableDoc(path, info.description or ""))
        for key, entry in (value or {}).items():
            out.append(TableDoc(f"{path}.{_key_text(key)}", ""))
            _fill(out, out[-1], _model(args[1]), entry)


def _fill(
    out: list[TableDoc], table: TableDoc, model: type[BaseModel], value: BaseModel | None
) -> None:
    later = []
    for name, info in model.model_fields.items():
        ann, _ = unwrap(info.annotation)
        if _model(ann) is not None or _holds_models(ann):
            later.append((name, info))
            continue
        if value is not None:
            default: str | None = _toml(getattr(value, name))
        elif info.is_required():
            default = REQUIRED
        else:
            default = _toml(_default(info))
        table.keys.append(KeyDoc(name, info.description or "", allowed_text(info), default))
    for name, info in later:
        _table(
            out,
            f"{table.path}.{name}",
            info,
            getattr(value, name) if value is not None else _default(info),
        )


def _default(info: FieldInfo) -> Any:
    """The field's default value (its factory called); None for a required field."""
    return (
        None
        if info.is_required()
        else info.get_default(call_default_factory=True, validated_data={})
    )


def allowed_text(info: FieldInfo) -> str:
    """What the key allows, in words: its type, range, choices or pattern; "or unset" where
    it may be left out without a default."""
    text = _kind(info.annotation, info.metadata)
    if _optional(info.annotation):
        text += "; or unset"
    return text


def _kind(ann: Any, metadata: list[Any]) -> str:
    ann, inner = unwrap(ann)
    bounds = bounds_of(metadata) or inner
    origin, args = get_origin(ann), get_args(ann)
    if ann is bool:
        return "true or false"
    if ann in (int, float):
        noun = "a whole number" if ann is int else "a number"
        return allowed_range(ann, bounds).removeprefix("allowed: ") or noun
    if ann is str:
        return _describe("a string", _lengths(metadata, "characters"), _pattern(metadata))
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(a) for a in args)
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return "one of " + ", ".join(json.dumps(m.value) for m in ann)
    if origin is list:
        return _describe(f"a list, each {_kind(args[0], [])}", _lengths(metadata, "items"))
    if origin is dict:
        names = _kind(args[0], [])
        return f"a table, each NAME = {_kind(args[1], [])}" + (
            "" if names.startswith("a string") else f"; NAME {names}"
        )
    return "a value"  # pragma: no cover - every field's type is one of the above


def _describe(head: str | None, *extras: str | None) -> str:
    return "; ".join(x for x in (head, *extras) if x)


def _lengths(metadata: list[Any], unit: str = "items") -> str | None:
    low = next((m.min_length for m in metadata if getattr(m, "min_length", None) is not None), None)
    high = next(
        (m.max_length for m in metadata if getattr(m, "max_length", None) is not None), None
    )
    if low and high:
        return f"{low} to {high} {unit}"
    if low:
        return "at least one" if low == 1 else f"at least {low}"
    if high:
        return f"at most {high} {unit}"
    return None


def _pattern(metadata: list[Any]) -> str | None:
    pattern = next((m.pattern for m in metadata if getattr(m, "pattern", None)), None)
    return f"matching {pattern}" if pattern else None


def _optional(ann: Any) -> bool:
    return get_origin(ann) in (Union, UnionType) and type(None) in get_args(ann)


def _model(ann: Any) -> type[BaseModel] | None:
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _holds_models(ann: Any) -> bool:
    args = get_args(ann)
    return (get_origin(ann) is list and bool(args) and _model(args[0]) is not None) or (
        get_origin(ann) is dict and len(args) == 2 and _model(args[1]) is not None
    )


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key_text(key: Any) -> str:
    key = key.value if isinstance(key, enum.Enum) else str(key)
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml(value: Any) -> str | None:
    """``value`` as TOML text; None for None (TOML has no null: the key is left out)."""
    if value is None:
        return None
    if isinstance(value, enum.Enum):
        return _toml(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) or '""' for v in value) + "]"
    if isinstance(value, dict):
        items = [f"{_key_text(k)} = {_toml(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, BaseModel):
        return _inline(value)
    raise TypeError(f"no TOML for {value!r}")  # pragma: no cover


def _inline(entry: BaseModel) -> str:
    """A table entry as an inline TOML table: the keys it sets apart from their defaults."""
    items = []
    for name, info in type(entry).model_fields.items():
        v = getattr(entry, name)
        if v is not None and (info.is_required() or v != _default(info)):
            items.append(f"{name} = {_toml(v)}")
    return "{ " + ", ".join(items) + " }"
