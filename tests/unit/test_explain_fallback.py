"""Where ``slurm-dl explain`` and ``dlsubmit status`` get a job's explanation when the store
cannot be opened or read here, whatever its database: the explain endpoint, or one message that
names both failures. The store's failures are real (a PostgreSQL socket that is not there, a
file that is not a database); the endpoint's failure is real too (no munged to vouch for the
user). The endpoint answering after the store failed is checked live, against PostgreSQL, in
``tests/integration/test_user_view_live.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.errors import StoreError
from slurm_dl.core.model import Job, JobState
from slurm_dl.explain.query import NeitherAnswers, NoWayToAsk, explanation
from slurm_dl.testbed.site_toml import with_database_url, with_setting

ROOT = Path(__file__).resolve().parents[2]


def _site(tmp_path: Path, url: str, endpoint: bool):
    text = with_database_url((ROOT / "site-configs" / "testbed.toml").read_text(), url)
    if endpoint:
        for key, value in (
            ("explain_port", 1),  # nothing is asked: no munged vouches for the user first
            ("explain_host", "127.0.0.1"),
            ("munge_socket", str(tmp_path / "no-munged" / "socket")),
        ):
            text = with_setting(text, "prioritizer", key, value)
    path = tmp_path / "site.toml"
    path.write_text(text)
    return load_config(path)


def _postgres_away(tmp_path: Path) -> str:
    pytest.importorskip("psycopg")
    return f"postgresql+psycopg://slurmdl@/slurmdl?host={tmp_path / 'no-server'}"


def test_a_postgresql_store_that_cannot_be_reached_falls_back_and_names_both_failures(
    tmp_path: Path,
) -> None:
    cfg = _site(tmp_path, _postgres_away(tmp_path), endpoint=True)
    stores: dict = {}
    with pytest.raises(NeitherAnswers) as got:
        explanation(cfg, 7, live=False, stores=stores)
    text = str(got.value)
    assert "database postgresql" in text and "no-server" in text, text
    assert "and its explain endpoint:" in text and "munge" in text.lower(), text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    url = cfg.site.database_url
    assert isinstance(stores[url], StoreError)  # the next job of a table does not retry the store
    with pytest.raises(NeitherAnswers):
        explanation(cfg, 8, live=False, stores=stores)


def test_without_an_endpoint_the_stores_own_failure_is_named(tmp_path: Path) -> None:
    cfg = _site(tmp_path, _postgres_away(tmp_path), endpoint=False)
    with pytest.raises(NoWayToAsk) as got:
        explanation(cfg, 7, live=False)
    text = str(got.value)
    assert "no-server" in text and "explain_port" in text, text
    assert all(len(line) <= 80 for line in text.splitlines()), text


def test_a_sqlite_file_readable_but_not_a_database_falls_back_too(tmp_path: Path) -> None:
    junk = tmp_path / "ledger.db"
    junk.write_bytes(b"this is not a database file at all" * 100)
    cfg = _site(tmp_path, f"sqlite:///{junk}", endpoint=True)
    with pytest.raises(NeitherAnswers) as got:
        explanation(cfg, 7, live=False)
    assert "ledger.db" in str(got.value) and "its explain endpoint:" in str(got.value)


def test_a_store_named_with_db_is_not_swapped_for_the_endpoint(tmp_path: Path) -> None:
    url = _postgres_away(tmp_path)
    cfg = _site(tmp_path, "sqlite:///" + str(tmp_path / "unused.db"), endpoint=True)
    with pytest.raises(StoreError) as got:
        explanation(cfg, 7, db=url, live=False)
    assert not isinstance(got.value, NeitherAnswers) and "no-server" in str(got.value)


def test_status_says_in_one_note_that_neither_answered(tmp_path: Path) -> None:
    from slurm_dl.dlsubmit.status import Explainer, describe_jobs

    explainer = Explainer(_site(tmp_path, _postgres_away(tmp_path), endpoint=True))
    job = Job(9, name="r", state=JobState.PENDING, state_reason="Resources")
    rows = describe_jobs([job], 9, explainer)
    assert [r["why"] for r in rows] == [None]
    assert explainer.unavailable is not None
    assert "explain endpoint did not answer" in explainer.unavailable, explainer.unavailable
