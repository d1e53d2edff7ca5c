"""Reading a site config file."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ..errors import ConfigError
from .problems import parse_config
from .site_config import SiteConfig


def load_config(path: str | Path) -> SiteConfig:
    """Read and validate a site config file; every failure is a :class:`ConfigError`."""
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

