"""Where every slurm-dl command finds the site config, and the one function that reads it.

The site config: ``--config FILE``, else ``$SLURM_DL_CONFIG``, else ``/etc/slurm-dl/site.toml``;
with none of the three an error names all of them. The database: ``--db URL``, else the
config's ``[site] database_url``, else SQLite under the state directory
(``sqlite:////var/lib/slurm-dl/ledger.db``; :func:`slurm_dl.core.database_url.database_url`).
Relative SQLite paths are refused by the config check: they would resolve against whatever
directory a command happens to run in.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Mapping

import typer

from ..core.config import SiteConfig, parse_config
from ..core.errors import ConfigError

CONFIG_ENV = "SLURM_DL_CONFIG"
DEFAULT_CONFIG = Path("/etc/slurm-dl/site.toml")
CONFIG_HELP = f"site config TOML (default: ${CONFIG_ENV}, else {DEFAULT_CONFIG})"

# The --config and --db options of every command (but simulate's and tune's, whose --config is
# another thing: configs to compare, the config to start a search from).
ConfigOpt = typer.Option(None, "--config", "-c", metavar="FILE", help=CONFIG_HELP)
"""--config FILE, -c FILE: the commands that need a site config (none found: an error naming the
three places)."""
ConfigOrBuiltinOpt = typer.Option(
    None,
    "--config",
    metavar="FILE",
    help=f"site config TOML (default: ${CONFIG_ENV}, else the file {DEFAULT_CONFIG}, "
    "else built-in defaults)",
)
"""--config FILE of the commands that run on built-in defaults without one (dlsubmit, gpu-agent).
No -c: after a program's name a -c is the program's own, and dlsubmit names the missing -- instead."""
DbOpt = typer.Option(
    None, "--db", metavar="URL", help="SQLAlchemy URL of the store (default: [site] database_url)"
)


class NoSiteConfigError(ConfigError):
    """None of --config, $SLURM_DL_CONFIG and the default path names a config."""

    def __init__(self, default: Path) -> None:
        self.source = "site config"
        self.problems = [f"no --config, ${CONFIG_ENV} unset, {default} missing"]
        Exception.__init__(
            self,
            f"no site config: none given with --config or ${CONFIG_ENV},\n"
            f"  and {default} does not exist (examples: site-configs/)",
        )


def find_config(
    given: Path | str | None, env: Mapping[str, str] | None = None, default: Path | None = None
) -> Path | None:
    """The config file to use, or None when none of the three places names one."""
    if given is not None and str(given) != "":
        return Path(given)
    env = os.environ if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV])
    default = DEFAULT_CONFIG if default is None else default
    return default if default.is_file() else None


def config_path(
    given: Path | str | None, env: Mapping[str, str] | None = None, default: Path | None = None
) -> Path:
    """Like :func:`find_config`, but a :class:`ConfigError` naming all three places when none."""
    found = find_config(given, env, default)
    if found is None:
        raise NoSiteConfigError(DEFAULT_CONFIG if default is None else default)
    return found


def load_config(path: str | Path) -> SiteConfig:
    """Read and validate a site config file; every failure is a :class:`ConfigError` naming the
    file. The files it names (a Gittins prior, a throughput matrix) are taken from its folder."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(str(p), [f"cannot read the file: {e.strerror or e}"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(str(p), [f"not UTF-8 text: {e}"]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(p), [f"not valid TOML: {e}"]) from None
    return parse_config(data, str(p), p.parent)
