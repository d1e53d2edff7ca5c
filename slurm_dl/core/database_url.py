"""The default database URL and the check of a configured one (plain strings; the site config
refuses a relative SQLite path, :mod:`slurm_dl.site_paths` finds the database to use)."""

from __future__ import annotations

import re
from pathlib import Path

STATE_DIR = Path("/var/lib/slurm-dl")
DEFAULT_DATABASE_URL = f"sqlite:///{STATE_DIR}/ledger.db"

_SQLITE = re.compile(r"^sqlite(\+\w+)?://(?P<rest>.*)$")


def sqlite_path(url: str) -> str | None:
    """The file path of a SQLite URL (``''`` for an in-memory one); None for other databases."""
    m = _SQLITE.match(url)
    if m is None:
        return None
    rest = m.group("rest")
    if not rest.startswith("/"):
        return ""  # sqlite:// is in memory
    path = rest[1:].split("?", 1)[0]
    return "" if path in ("", ":memory:") else path


def relative_sqlite_problem(url: str) -> str | None:
    """Why a database URL is refused in a site config, or None when it is fine."""
    path = sqlite_path(url)
    if path and not path.startswith("/"):
        return f"relative SQLite path; use an absolute one such as {DEFAULT_DATABASE_URL}"
    return None
