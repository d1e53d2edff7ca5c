"""The release a host runs is named once: ``slurm_dl.__version__``; ``--version`` prints it and
the newest heading of CHANGELOG.md (``## [X.Y.Z] - YYYY-MM-DD``) names it, so two hosts can be
compared and each release says what changed."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

from typer.testing import CliRunner

import slurm_dl
from slurm_dl.cli.main import app

REPO = Path(__file__).resolve().parents[2]
HEADING = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)


def test_the_newest_changelog_heading_is_the_version_that_runs() -> None:
    found = HEADING.findall((REPO / "CHANGELOG.md").read_text())
    assert found, "CHANGELOG.md has no '## [X.Y.Z] - date' heading"
    newest, when = found[0]
    assert newest == slurm_dl.__version__
    date.fromisoformat(when)
    versions = [tuple(map(int, v.split("."))) for v, _ in found]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    assert [d for _, d in found] == sorted((d for _, d in found), reverse=True)
    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0 and out.output.splitlines()[0] == f"slurm-dl (slurm-dl) {newest}"
