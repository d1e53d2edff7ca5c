"""``slurm-dl db upgrade|status|backup``: the prioritizer's database schema and backups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from .config_file import ConfigOpt, DbOpt
from ..core.database_url import database_url, hide_password, shown_url
from .common import expected_errors, fail

app = typer.Typer(
    help="""The prioritizer's database: schema revision, upgrades and backups.

    \b
    Examples:
      slurm-dl db status
      slurm-dl db upgrade --db postgresql+psycopg://slurmdl@db/slurmdl
      slurm-dl db backup /var/lib/slurm-dl/ledger.db.bak
    """,
    no_args_is_help=True,
)


def _url(config: Optional[Path], db: Optional[str]) -> str:
    if db:
        return db
    from .config_file import config_path, load_config

    return database_url(load_config(config_path(config)))


@app.command()
def upgrade(
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Migrate the database to this release's schema.

    Stop the prioritizer and back the database up first. A database made
    before schema versions existed is taken as the first revision.

    \b
    Example:
      slurm-dl db upgrade --config /etc/slurm-dl/site.toml
    """
    from ..store import Store
    from ..store.repository import private_sqlite_file
    from ..store.schema import upgrade as run_upgrade

    with expected_errors():
        url = _url(config, db)
        private_sqlite_file(url)  # the one command that creates the store (a new SQLite file: 0600)
        store = Store(url, check_schema=False, create=False)
        try:
            before, after = run_upgrade(store.engine, url)
        except Exception as e:  # noqa: BLE001 - a failed migration is rolled back; say why in one line
            from ..core.errors import SlurmDLError

            if isinstance(e, SlurmDLError):
                raise
            raise fail(
                f"database {shown_url(url)}: upgrade failed and was rolled back: {type(e).__name__}: "
                f"{hide_password(str(e).splitlines()[0], url) if str(e) else ''}"
            ) from None
        finally:
            store.close()
    shown = shown_url(url)
    if as_json:
        typer.echo(json.dumps({"database": shown, "before": before, "after": after}))
    elif before == after:
        typer.echo(f"database {shown}: already at schema {after}")
    else:
        typer.echo(f"database {shown}: schema {before or '(new)'} -> {after}")


@app.command()
def status(config: Optional[Path] = ConfigOpt, db: Optional[str] = DbOpt) -> None:
    """Show the database's schema revision; changes nothing.

    Exits 1 when the database needs an upgrade, is empty (none of the
    prioritizer's tables: a wrong URL, or a first start) or is missing.
    Only slurm-dl db upgrade creates or migrates it.

    \b
    Example:
      slurm-dl db status --db sqlite:////var/lib/slurm-dl/ledger.db
    """
    from ..store import Store
    from ..store.schema import HEAD

    with expected_errors():
        url = _url(config, db)
        store = Store(url, check_schema=False, create=False)
        rev = store.revision
        store.close()
    shown = shown_url(url)
    if rev == HEAD:
        typer.echo(f"database {shown}: schema {rev} (current)")
        return
    if rev is None:
        typer.echo(
            f"database {shown}: empty: it holds none of the prioritizer's tables\n"
            "  (a wrong URL? check [site] database_url or --db;\n"
            "  on a first install, slurm-dl db upgrade creates them)",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(f"database {shown}: schema {rev}, this release uses {HEAD}: run slurm-dl db upgrade")
    raise typer.Exit(1)


@app.command()
def backup(
    dest: Path = typer.Argument(..., help="the new file to write (never overwritten)"),
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
) -> None:
    """Copy the SQLite database to a new file, safely, even while it is in use.

    Uses SQLite's online backup: unlike cp, the copy includes what is still
    in the write-ahead log (after a crash, or while the prioritizer runs).
    The copy is checked and readable by its owner alone. For PostgreSQL,
    use pg_dump.

    \b
    Example:
      slurm-dl db backup /var/lib/slurm-dl/ledger.db.bak
    """
    from ..store.backup import backup_sqlite

    with expected_errors():
        url = _url(config, db)
        size = backup_sqlite(url, dest)
    typer.echo(f"database {shown_url(url)}: backed up to {dest} ({size / 2**20:.1f} MiB, checked)")
