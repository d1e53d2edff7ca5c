"""Schema versions of the store: which revision a database is at, and upgrading it.

A new database is created at :data:`HEAD` and stamped. A database made before schema versions
existed (the store's tables, no ``alembic_version``) is the baseline, revision ``0001``. The
daemon refuses any revision but :data:`HEAD`, with the command that fixes it; ``slurm-dl db
upgrade`` runs the Alembic migrations in ``migrations/`` (imported only then).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

from ..core.errors import StoreError
from ..core.database_url import shown_url

HEAD = "0008"
KNOWN = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008")
"""Every revision this release can upgrade from, oldest first."""
BASELINE = "0001"
VERSION_TABLE = "alembic_version"
_STORE_TABLES = (
    "sdl_ledger",
    "sdl_site_factor",
    "sdl_preemption",
    "sdl_decision",
    "sdl_explanations",
    "sdl_job_utilisation",
)
MIGRATIONS = Path(__file__).with_name("migrations")


class SchemaError(StoreError):
    """The database's schema is not the one this release uses; says how to fix it."""


def current(conn: Connection) -> str | None:
    """The revision the database is at; None when it has none of the store's tables."""
    names = set(inspect(conn).get_table_names())
    if VERSION_TABLE in names:
        row = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).first()
        if row is not None:
            return str(row[0])
    if names & set(_STORE_TABLES):
        return BASELINE
    return None


def stamp(conn: Connection, revision: str) -> None:
    conn.execute(
        text(
            f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL, "
            f"CONSTRAINT {VERSION_TABLE}_pkc PRIMARY KEY (version_num))"
        )
    )
    conn.execute(text(f"DELETE FROM {VERSION_TABLE}"))
    conn.execute(text(f"INSERT INTO {VERSION_TABLE} (version_num) VALUES (:v)"), {"v": revision})


def upgrade_command(url: str) -> str:
    if shown_url(url) != url:  # a password in the URL: never printed, so not in a command either
        return "slurm-dl db upgrade (with the same --config, or --db URL)"
    return f"slurm-dl db upgrade --db '{url}'"


def require_head(url: str, revision: str | None) -> None:
    """Raise :class:`SchemaError` unless ``revision`` is :data:`HEAD`."""
    if revision == HEAD:
        return
    command = upgrade_command(url)
    url = shown_url(url)
    if revision in KNOWN:
        raise SchemaError(
            f"database {url}: schema revision {revision} is older than this slurm-dl's "
            f"{HEAD}\n  (stop the prioritizer, back the database up, then run: "
            f"{command})"
        )
    raise SchemaError(
        f"database {url}: schema revision {revision!r} is unknown to this slurm-dl "
        f"(which knows {', '.join(KNOWN)});\n  it was made by a newer release: install that "
        "release again, or restore a backup made before it"
    )


def upgrade(engine: Engine, url: str) -> tuple[str | None, str]:
    """Migrate the database to :data:`HEAD`; returns (revision before, revision after)."""
    from alembic import command
    from alembic.config import Config

    with engine.begin() as conn:
        before = current(conn)
        if before is not None and before not in KNOWN:
            require_head(url, before)  # unknown: refuse, never touch it
        if before == BASELINE and VERSION_TABLE not in inspect(conn).get_table_names():
            stamp(conn, BASELINE)  # made before schema versions: it is the baseline
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        after = current(conn)
    return before, after or HEAD
