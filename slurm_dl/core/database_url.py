"""Database URLs as plain strings: the default one, the check of a configured one (the site
config refuses a relative SQLite path), the one a command uses, and how one may be shown
(its password masked, as SQLAlchemy renders it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote

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


def database_url(config: Any, override: str | None = None) -> str:
    """``--db`` if given, else the config's ``[site] database_url`` (itself defaulting to the state
    dir); the default with no config (``config``: a SiteConfig or None)."""
    if override:
        return override
    if config is None:
        return DEFAULT_DATABASE_URL
    return config.site.database_url


# SQLAlchemy's URL syntax (sqlalchemy.engine.url._parse_url), so that a URL is read here as the
# store reads it: name://user:password@host:port/database?query
_URL = re.compile(
    r"""
    (?P<name>[\w\+]+)://
    (?:(?P<username>[^:/]*)(?::(?P<password>[^@]*))?@)?
    (?:(?:\[(?P<ipv6host>[^/\?]+)\]|(?P<ipv4host>[^/:\?]+))?(?::(?P<port>[^/\?]*))?)?
    (?:/(?P<database>[^\?]*))?
    (?:\?(?P<query>.*))?
    """,
    re.X,
)
_USERINFO = re.compile(r"^(?P<head>[\w+.-]+://[^:/@?#]*):(?P<pw>[^@/?#]*)@")


def _parts(url: str) -> dict[str, Any]:
    """The parts of ``url`` as SQLAlchemy's ``make_url`` reads them; ValueError where it refuses."""
    m = _URL.match(url)
    if m is None:
        raise ValueError("not a database URL")
    p: dict[str, Any] = m.groupdict()
    query: dict[str, list[str]] | None = None
    if p["query"] is not None:
        query = {}
        for key, value in parse_qsl(p["query"]):
            query.setdefault(key, []).append(value)
    p["query"] = query
    for key in ("username", "password", "database"):
        if p[key] is not None:
            p[key] = unquote(p[key])
    p["host"] = p.pop("ipv4host") or p.pop("ipv6host")
    if p["port"] is not None:
        p["port"] = int(p["port"])  # ValueError for a port that is no number (an empty one too)
    return p


def _render(p: dict[str, Any]) -> str:
    """SQLAlchemy's ``URL.render_as_string(hide_password=True)``."""
    s = p["name"] + "://"
    if p["username"] is not None:
        s += quote(p["username"], safe=" +")
        if p["password"] is not None:
            s += ":***"
        s += "@"
    if p["host"] is not None:
        s += f"[{p['host']}]" if ":" in p["host"] else p["host"]
    if p["port"] is not None:
        s += f":{p['port']}"
    if p["database"] is not None:
        s += "/" + quote(p["database"], safe=" +/")
    if p["query"]:
        s += "?" + "&".join(
            f"{quote_plus(k)}={quote_plus(v)}" for k in sorted(p["query"]) for v in p["query"][k]
        )
    return s


def shown_url(url: str) -> str:
    """``url`` as it may be shown (logs, messages, JSON): its password replaced by ``***``
    (SQLAlchemy's own rendering); a URL it cannot parse keeps no text between ``user:`` and ``@``."""
    try:
        parts = _parts(url)
    except Exception:  # noqa: BLE001 - unparsable: mask by pattern below
        return _USERINFO.sub(lambda m: f"{m.group('head')}:***@", url)
    if parts["password"] is None:
        return url  # nothing to hide: shown exactly as written
    return _render(parts)


def hide_password(text: str, url: str) -> str:
    """``text`` (a driver's error message) with ``url``'s password, if any, replaced by ``***``."""
    try:
        pw = _parts(url)["password"] if url else None
    except Exception:  # noqa: BLE001
        m = _USERINFO.match(url or "")
        pw = m.group("pw") if m else None
    return text.replace(str(pw), "***") if pw else text
