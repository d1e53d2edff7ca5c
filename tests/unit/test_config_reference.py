"""Every setting of the site config is explained: each field of each model reachable from
SiteConfig has a description, and ``slurm-dl config defaults`` prints every key with it, in
80 columns, as a TOML file that loads to the defaults."""

from __future__ import annotations

import re
import tomllib
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.config import SiteConfig, parse_config

REQUIRED_PART = {
    "gpu_types": [{"name": "h100"}],
    "node_groups": [{"name": "g", "nodes": "gpu[01-02]", "gpus_per_node": 8, "gpu_type": "h100"}],
}


def _models(ann: Any) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for a in get_args(ann) for m in _models(a)]


def _fields() -> list[tuple[type[BaseModel], str, Any]]:
    seen: list[type[BaseModel]] = []
    out = []

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.append(model)
        for name, info in model.model_fields.items():
            out.append((model, name, info))
            for sub in _models(info.annotation):
                walk(sub)

    walk(SiteConfig)
    return out


def _keys(model: type[BaseModel], path: str, value: Any = None) -> set[tuple[str, str]]:
    """(table, key) of every scalar key under ``model``; classes by their default names."""
    out: set[tuple[str, str]] = set()
    for name, info in model.model_fields.items():
        ann = info.annotation
        if get_origin(ann) is Union:
            ann = next(a for a in get_args(ann) if a is not type(None))
        sub = f"{path}.{name}" if path else name
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out |= _keys(ann, sub)
        elif get_origin(ann) is list and _models(get_args(ann)[0]):
            out |= _keys(_models(get_args(ann)[0])[0], sub)
        elif get_origin(ann) is dict and _models(get_args(ann)[1]):
            for key in info.get_default(call_default_factory=True, validated_data={}):
                out |= _keys(_models(get_args(ann)[1])[0], f"{sub}.{getattr(key, 'value', key)}")
        else:
            out.add((path, name))
    return out


def _defaults_output() -> str:
    result = CliRunner().invoke(app, ["config", "defaults"])
    assert result.exit_code == 0, result.output
    return result.output


def test_every_field_of_every_model_has_a_description() -> None:
    fields = _fields()
    assert len(fields) > 140
    missing = [f"{m.__name__}.{n}" for m, n, info in fields if not (info.description or "").strip()]
    assert not missing, f"fields without a description: {missing}"


def test_config_defaults_prints_every_key_with_its_description() -> None:
    text = _defaults_output()
    found: set[tuple[str, str]] = set()
    table = ""
    for line in text.splitlines():
        if m := re.match(r"^(?:# )?\[\[?([\w.]+)\]\]?$", line):
            table = m.group(1)
        elif m := re.match(r"^(?:# )?(\w+) = ", line):
            found.add((table, m.group(1)))
    missing = sorted(_keys(SiteConfig, "") - found)
    assert not missing, f"config defaults does not print {missing}"
    comments = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    for model, name, info in _fields():
        assert " ".join(info.description.split()) in comments, (
            f"{model.__name__}.{name}: description not printed"
        )


def test_config_defaults_is_a_config_of_the_defaults_in_80_columns() -> None:
    text = _defaults_output()
    assert not [line for line in text.splitlines() if len(line) > 80]
    data = tomllib.loads(text)
    assert "gpu_types" not in data and "node_groups" not in data  # no defaults: shown as comments
    shown = parse_config({**data, **REQUIRED_PART}, "defaults")
    assert shown.model_dump() == parse_config(dict(REQUIRED_PART), "defaults").model_dump()
    assert "allowed: a whole number from 1 to 64" in text  # node_groups.gpus_per_node's range
    assert "# name = (required)" in text and "# max_gpus_per_job = (unset)" in text
