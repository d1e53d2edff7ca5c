"""Fixtures every test may use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def traces_dir() -> Path | None:
    """The shared public traces: $SLURM_DL_TRACES, else ../shared/traces beside the repository."""
    env = os.environ.get("SLURM_DL_TRACES")
    cand = Path(env) if env else REPO.parent / "shared" / "traces"
    return cand if cand.is_dir() else None


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    d = traces_dir()
    if d is None:
        pytest.skip(
            "shared traces not found (set SLURM_DL_TRACES or place them at ../shared/traces)"
        )
    return d


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """A daemon's main() run in-process adds a root handler on the stderr of that moment
    (a test runner's capture stream, closed after the test). Put the root logger back as it
    was, so later log lines never go to a closed stream."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in root.handlers:
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)
