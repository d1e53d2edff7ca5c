"""A database URL as it may be shown: the password masked exactly as SQLAlchemy renders it
(the core does it without SQLAlchemy), and a driver's message without the password."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from slurm_dl.core.database_url import hide_password, shown_url


def _sqlalchemy_shown(url: str) -> str | None:
    """What SQLAlchemy shows for ``url``: None where it cannot parse it."""
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001
        return None
    return url if parsed.password is None else parsed.render_as_string(hide_password=True)


@pytest.mark.parametrize(
    "url,shown",
    [
        (
            "postgresql+psycopg://slurmdl:SECRET@db.example.org/slurmdl",
            "postgresql+psycopg://slurmdl:***@db.example.org/slurmdl",
        ),
        ("postgresql://u:p%40ss@h:5432/db?b=2&a=1", "postgresql://u:***@h:5432/db?a=1&b=2"),
        ("mysql://u:pw@[::1]:3306/d", "mysql://u:***@[::1]:3306/d"),
        ("postgresql+psycopg://slurmdl@db/slurmdl", "postgresql+psycopg://slurmdl@db/slurmdl"),
        ("sqlite:////var/lib/slurm-dl/ledger.db", "sqlite:////var/lib/slurm-dl/ledger.db"),
        (
            "pg://u:pw@h:notaport/d",
            "pg://u:***@h:notaport/d",
        ),  # SQLAlchemy refuses it: masked by pattern
    ],
)
def test_shown_url_masks_the_password(url: str, shown: str) -> None:
    assert shown_url(url) == shown
    assert "pw" not in shown_url(url) and "SECRET" not in shown_url(url)


_PART = st.text(alphabet="ab:/@?#[]%&=+ 1é.", max_size=12)


@settings(max_examples=3000, deadline=None)
@given(
    st.sampled_from(["postgresql://", "postgresql+psycopg://", "a_b://", "x:/", ""]),
    _PART,
    _PART,
    _PART,
)
def test_shown_url_is_sqlalchemys_rendering(head: str, a: str, b: str, c: str) -> None:
    url = f"{head}{a}:{b}@{c}" if b else f"{head}{a}{c}"
    expected = _sqlalchemy_shown(url)
    if expected is not None:
        assert shown_url(url) == expected, url


def test_hide_password_in_a_driver_message() -> None:
    url = "postgresql+psycopg://slurmdl:SECRET@db/slurmdl"
    assert (
        hide_password('password authentication failed: "SECRET"', url)
        == 'password authentication failed: "***"'
    )
    assert hide_password("no password here", "sqlite:////x.db") == "no password here"
    assert (
        hide_password("x:pw here", "pg://x:pw@h:bad/d") == "x:*** here"
    )  # unparsable: the pattern's password
