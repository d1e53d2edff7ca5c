"""The command help quoted in docs/ is the commands' real --help at 80 columns, so the docs
cannot drift. After changing a command's help, regenerate with:
    UPDATE_DOCS=1 pytest tests/unit/test_docs_help.py
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.dlsubmit.cli import app as dlsubmit_app
from slurm_dl.cli.main import app as slurm_dl_app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "users.md"]
BLOCK = re.compile(r"<!-- help: (?P<cmd>[^>]+?) -->\n(?P<body>.*?)<!-- end help -->", re.DOTALL)
APPS = {"dlsubmit": dlsubmit_app, "slurm-dl": slurm_dl_app}


def help_text(cmd: str) -> str:
    prog, *path = cmd.split()
    result = CliRunner().invoke(
        APPS[prog],
        [*path, "--help"],
        prog_name=prog,
        env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"},
        terminal_width=80,
    )
    assert result.exit_code == 0, result.output
    return result.output


def render_block(cmd: str) -> str:
    return f"<!-- help: {cmd} -->\n```text\n$ {cmd} --help\n{help_text(cmd).rstrip()}\n```\n<!-- end help -->"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_help_in_docs_matches_the_commands(doc: Path) -> None:
    text = doc.read_text()
    blocks = list(BLOCK.finditer(text))
    assert blocks, f"{doc.name} quotes no command help"
    fresh = BLOCK.sub(lambda m: render_block(m.group("cmd")), text)
    if os.environ.get("UPDATE_DOCS"):
        doc.write_text(fresh)
    assert fresh == text, (
        f"{doc.name}: the quoted help differs from --help; run UPDATE_DOCS=1 pytest {__file__}"
    )
