"""Every command's and subcommand's --help, as a user at an 80-column terminal sees it: no line
over 80 characters, no internal notes or source paths, an example per command, plain flags
without a metavar, and no path or hyphenated name split across two lines. Also --version on
both commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from slurm_dl.dlsubmit.cli import app as dlsubmit_app
from slurm_dl.cli.main import app as slurm_dl_app

runner = CliRunner()
ENV = {"COLUMNS": "80", "TERMINAL_WIDTH": "80", "NO_COLOR": "1"}
# The project's own files (examples may name the user's train.py).
SOURCE_PATH = re.compile(
    r"\b(slurm_dl|prioritizer|jobsubmit|benchmarks|tests)[/.]\w|/work/|\w+_cmd\.py|…/"
)


def _command(app: typer.Typer, path: list[str]):
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def _path_defaults(cmd) -> list[str]:
    """The defaults of ``cmd``'s options that are paths, as its help shows them."""
    out = []
    for p in cmd.params:
        d = p.default
        if getattr(p, "show_default", None) is not False and isinstance(d, (str, Path)):
            if "/" in str(d):
                out.append(str(d))
    return out


def _paths(app: typer.Typer, name: str) -> list[list[str]]:
    root = typer.main.get_command(app)
    out: list[list[str]] = []

    def walk(cmd, path: list[str]) -> None:
        out.append(path)
        for sub_name, sub in sorted(getattr(cmd, "commands", {}).items()):
            if not sub.hidden:
                walk(sub, [*path, sub_name])

    walk(root, [])
    return out


def _case(app: typer.Typer, name: str, path: list[str]):
    return (app, name, path)


CASES = [(dlsubmit_app, "dlsubmit", p) for p in _paths(dlsubmit_app, "dlsubmit")] + [
    (slurm_dl_app, "slurm-dl", p) for p in _paths(slurm_dl_app, "slurm-dl")
]
IDS = [" ".join([n, *p]) for _, n, p in CASES]


def _help(app: typer.Typer, path: list[str], width: int = 80) -> str:
    """The help wrapped at ``width``: 80, or 78, as a terminal of 80 columns shows it (the
    help leaves a margin of 2 where the width is not forced)."""
    result = runner.invoke(app, [*path, "--help"], env=ENV, terminal_width=width)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("app, name, path", [_case(*c) for c in CASES], ids=IDS)
def test_help_fits_80_columns_and_speaks_to_users(
    app: typer.Typer, name: str, path: list[str]
) -> None:
    text = _help(app, path)
    long = [line for line in text.splitlines() if len(line) > 80]
    assert not long, f"{name} {' '.join(path)} --help has lines over 80 columns: {long}"
    assert not re.search(r"\bissue\b", text, re.IGNORECASE), text
    assert not SOURCE_PATH.search(text), f"source path in help: {SOURCE_PATH.search(text).group(0)}"
    assert "<bool>" not in text, "a plain flag shows a metavar"
    assert "…" not in text, "something was cut off"


# A line that ends in the middle of a hyphenated word: a path (/var/lib/slurm-|dl/gpu-agent) or
# an option (--gpus-|per-node) the help wrapped at one of its hyphens.
_HYPHEN_SPLIT = re.compile(r"[A-Za-z0-9]-\n[ │]*[A-Za-z0-9]")


@pytest.mark.parametrize("app, name, path", [_case(*c) for c in CASES], ids=IDS)
def test_help_never_splits_a_path_or_a_hyphenated_name(
    app: typer.Typer, name: str, path: list[str]
) -> None:
    for text in (_help(app, path), _help(app, path, width=78)):
        split = _HYPHEN_SPLIT.search(text)
        assert not split, f"{name} {' '.join(path)} --help splits a word: {split.group(0)!r}"
        flat = " ".join(text.split())
        for default in _path_defaults(_command(app, path)):
            assert default in flat, f"{name} {' '.join(path)} --help: {default} not shown whole"


@pytest.mark.parametrize(
    "app, name, path",
    [_case(*c) for c in CASES if c[2]],
    ids=[i for i, c in zip(IDS, CASES) if c[2]],
)
def test_every_command_has_an_example(app: typer.Typer, name: str, path: list[str]) -> None:
    text = _help(app, path)
    assert re.search(r"^\s*Examples?\b", text, re.MULTILINE), f"{name} {' '.join(path)}: no example"
    assert f"{name} {path[0]}" in text or path[0] in text


@pytest.mark.parametrize("app, name", [(dlsubmit_app, "dlsubmit"), (slurm_dl_app, "slurm-dl")])
def test_version_names_package_schema_and_protocol(app: typer.Typer, name: str) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"{name} (slurm-dl) ")
    assert any(line.startswith("store schema: ") for line in lines)
    assert "filter protocol: 1" in lines


def test_infer_lists_only_its_own_options() -> None:
    text = _help(dlsubmit_app, ["infer"])
    assert "--inputs" in text
    for other in ("--nodes", "--param", "--parallel", "--endpoint-file", "--launcher"):
        assert other not in text, other
    assert "--nodes" in _help(dlsubmit_app, ["train"])
