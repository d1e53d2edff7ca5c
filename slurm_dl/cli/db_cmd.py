"""``slurm-dl db upgrade|status``: the prioritizer's database schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..site_paths import CONFIG_HELP, database_url
from .common import expected_errors, fail

app = typer.Typer(help="""The prioritizer's database: schema revision and upgrades.

    \b
    Examples:
      slurm-dl db status
      slurm-dl db upgrade --db postgresql+psycopg://slurmdl@db/slurmdl
    """, no_args_is_help=True)

ConfigOpt = typer.Option(None, "--config", "-c", help=CONFIG_HELP)
DbOpt = typer.Option(None, "--db", help="SQLAlchemy URL of the store (default: [site] database_url)")


def _url(config: Optional[Path], db: Optional[str]) -> str:
    if db:
        return db
    from ..core.config import load_config
    from ..site_paths import config_path

    return database_url(load_config(config_path(config)))


@app.command()
def upgrade(config: Optional[Path] = ConfigOpt, db: Optional[str] = DbOpt,
            as_json: bool = typer.Option(False, "--json", help="print the result as JSON")) -> None:
    """Migrate the database to this release's schema.

    Stop the prioritizer and back the database up first. A database made
    before schema versions existed is taken as the first revision.

    \b
    Example:
      slurm-dl db upgrade --config /etc/slurm-dl/site.toml
    """
    from ..store import Store
    from ..store.schema import upgrade as run_upgrade

    with expected_errors():
        url = _url(config, db)
        store = Store(url, check_schema=False)
        try:
            before, after = run_upgrade(store.engine, url)
        except Exception as e:  # noqa: BLE001 - a failed migration is rolled back; say why in one line
            from ..core.errors import SlurmDLError

            if isinstance(e, SlurmDLError):
                raise
            raise fail(f"database {url}: upgrade failed and was rolled back: {type(e).__name__}: "
                       f"{str(e).splitlines()[0] if str(e) else ''}") from None
        finally:
            store.close()
    if as_json:
        typer.echo(json.dumps({"database": url, "before": before, "after": after}))
    elif before == after:
        typer.echo(f"database {url}: already at schema {after}")
    else:
        typer.echo(f"database {url}: schema {before or '(new)'} -> {after}")


@app.command()
def status(config: Optional[Path] = ConfigOpt, db: Optional[str] = DbOpt) -> None:
    """Show the database's schema revision; exit 1 when it needs an upgrade.

    \b
    Example:
      slurm-dl db status --db sqlite:////var/lib/slurm-dl/ledger.db
    """
    from ..store import Store
    from ..store.schema import HEAD

    with expected_errors():
        url = _url(config, db)
        store = Store(url, check_schema=False)
        rev = store.revision
        store.close()
    if rev == HEAD:
        typer.echo(f"database {url}: schema {rev} (current)")
        return
    typer.echo(f"database {url}: schema {rev}, this release uses {HEAD}: run slurm-dl db upgrade")
    raise typer.Exit(1)



