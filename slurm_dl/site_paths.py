"""Where every slurm-dl command finds the site config and keeps its state.

The site config: ``--config FILE``, else ``$SLURM_DL_CONFIG``, else ``/etc/slurm-dl/site.toml``;
with none of the three an error names all of them. The database: ``--db URL``, else the
config's ``[site] database_url``, else SQLite under the state directory
(``sqlite:////var/lib/slurm-dl/ledger.db``). Relative SQLite paths are refused by the config
check: they would resolve against whatever directory a command happens to run in.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from .core.database_url import DEFAULT_DATABASE_URL, STATE_DIR, relative_sqlite_problem, sqlite_path  # noqa: F401
from .core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from .core.config import SiteConfig

CONFIG_ENV = "SLURM_DL_CONFIG"
DEFAULT_CONFIG = Path("/etc/slurm-dl/site.toml")
CONFIG_HELP = f"site config TOML (default: ${CONFIG_ENV}, else {DEFAULT_CONFIG})"


class NoSiteConfigError(ConfigError):
    """None of --config, $SLURM_DL_CONFIG and the default path names a config."""

    def __init__(self, default: Path) -> None:
        self.source = "site config"
        self.problems = [f"no --config, ${CONFIG_ENV} unset, {default} missing"]
        Exception.__init__(self, f"no site config: none given with --config or ${CONFIG_ENV},\n"
                                 f"  and {default} does not exist (examples: site-configs/)")


def find_config(given: Path | str | None, env: Mapping[str, str] | None = None,
                default: Path | None = None) -> Path | None:
    """The config file to use, or None when none of the three places names one."""
    if given is not None and str(given) != "":
        return Path(given)
    env = os.environ if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV])
    default = DEFAULT_CONFIG if default is None else default
    return default if default.is_file() else None


def config_path(given: Path | str | None, env: Mapping[str, str] | None = None,
                default: Path | None = None) -> Path:
    """Like :func:`find_config`, but a :class:`ConfigError` naming all three places when none."""
    found = find_config(given, env, default)
    if found is None:
        raise NoSiteConfigError(DEFAULT_CONFIG if default is None else default)
    return found


def load_site(given: Path | str | None) -> "SiteConfig":
    """The site config from the first of ``--config``, ``$SLURM_DL_CONFIG``, the default path."""
    from .core.config import load_config

    return load_config(config_path(given))


def database_url(config: "SiteConfig | None", override: str | None = None) -> str:
    """``--db`` if given, else the config's ``[site] database_url`` (itself defaulting to the state dir)."""
    if override:
        return override
    if config is None:
        return DEFAULT_DATABASE_URL
    return config.site.database_url


_USERINFO = re.compile(r"^(?P<head>[\w+.-]+://[^:/@?#]*):(?P<pw>[^@/?#]*)@")


def shown_url(url: str) -> str:
    """``url`` as it may be shown (logs, messages, JSON): its password replaced by ``***``
    (SQLAlchemy's own rendering); a URL it cannot parse keeps no text between ``user:`` and ``@``."""
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - unparsable: mask by pattern below
        return _USERINFO.sub(lambda m: f"{m.group('head')}:***@", url)
    if parsed.password is None:
        return url  # nothing to hide: shown exactly as written
    return parsed.render_as_string(hide_password=True)


def hide_password(text: str, url: str) -> str:
    """``text`` (a driver's error message) with ``url``'s password, if any, replaced by ``***``."""
    try:
        from sqlalchemy.engine import make_url

        pw = make_url(url).password if url else None
    except Exception:  # noqa: BLE001
        m = _USERINFO.match(url or "")
        pw = m.group("pw") if m else None
    return text.replace(str(pw), "***") if pw else text


_HEADER = re.compile(r"^[ \t]*\[\[?([^\[\]]+)\]\]?[ \t]*(#.*)?$", re.MULTILINE)  # [table], [[array]]


def with_setting(config_text: str, section: str, key: str, value: str | int) -> str:
    """The TOML text of a site config with ``[section] key`` set to the string ``value``
    (or number; replaced where the section has it, else added at the section's top; a missing section
    is added at the end). Comments and everything else stay as they were."""
    line = f"{key} = {json.dumps(value)}"
    headers = list(_HEADER.finditer(config_text))
    for i, m in enumerate(headers):
        if m.group(1).strip() != section:
            continue
        end = headers[i + 1].start() if i + 1 < len(headers) else len(config_text)
        body = config_text[m.end():end]
        body, n = re.subn(rf"(?m)^[ \t]*{re.escape(key)}[ \t]*=.*$", lambda _m: line, body, count=1)
        if not n:
            body = "\n" + line + body
        return config_text[:m.end()] + body + config_text[end:]
    sep = "" if not config_text or config_text.endswith("\n") else "\n"
    return f"{config_text}{sep}\n[{section}]\n{line}\n"


def with_database_url(config_text: str, url: str) -> str:
    """The TOML text of a site config with its ``[site] database_url`` set to ``url``."""
    return with_setting(config_text, "site", "database_url", url)
