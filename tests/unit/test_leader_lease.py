"""The leader lease on SQLite (the cases: tests/lease_cases.py; the same on a live
PostgreSQL: tests/integration/test_leader_postgres.py)."""

from __future__ import annotations

import pytest

import lease_cases as cases


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path}/ledger.db"


def test_one_leads_the_other_stands_by(url):
    cases.one_leads_the_other_stands_by(url)


def test_a_paused_leader_loses_the_lease_and_cannot_act(url):
    cases.a_paused_leader_loses_the_lease_and_cannot_act(url)


def test_a_released_lease_is_taken_at_once(url):
    cases.a_released_lease_is_taken_at_once(url)


def test_leadership_takes_over_and_says_so(url, caplog):
    cases.leadership_takes_over_and_says_so(url, caplog)
