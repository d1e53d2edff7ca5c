"""Unit tests run without a cluster: a SLURM_CONF left in the environment (the integration
tests' session testbed sets one when both run in one session) must not reach them, or
commands that read it by default (``config check``) compare against that testbed."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
