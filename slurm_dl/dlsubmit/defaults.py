"""Where dlsubmit's defaults come from: the site config and the user's own defaults file.

Site: ``--config FILE``, else ``$SLURM_DL_CONFIG``, else ``/etc/slurm-dl/site.toml``
(``slurm_dl.cli.config_file``), else a built-in default (any GPU type,
8 GPUs per node, the standard job classes). User: ``$SLURM_DL_USER_DEFAULTS``, else
``$XDG_CONFIG_HOME/slurm-dl/dlsubmit.toml``, else ``~/.config/slurm-dl/dlsubmit.toml``::

    partition = "gpu"
    account = "vision"
    time = "2:00:00"           # as sbatch --time takes it (time_minutes = 120 also works)
    mem_per_gpu = "80G"
    output_dir = "logs"
    checkpoint_root = "/scratch/me/ckpt"
    launcher = "auto"          # auto | torchrun | none
    [env]
    HF_HOME = "/scratch/me/hf"
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from ..core.config import SiteConfig, parse_config
from ..core.errors import ConfigError
from .render import BUILTIN_SITE_NAME, UserDefaults
from ..cli.config_file import find_config, load_config

_BUILTIN = {
    "site": {"name": BUILTIN_SITE_NAME},
    "gpu_types": [{"name": "gpu"}],
    "node_groups": [
        {"name": "any", "nodes": "node[001-999]", "gpus_per_node": 8, "gpu_type": "gpu"}
    ],
}
_USER_KEYS = {
    "partition": str,
    "account": str,
    "gpu_type": str,
    "time_minutes": int,
    "output_dir": str,
    "checkpoint_root": str,
    "launcher": str,
    "max_restarts": int,
    "cpus_per_gpu": int,
    "mem_per_gpu_gb": int,
    "time": str,
    "mem_per_gpu": str,
}


def builtin_site() -> SiteConfig:
    return parse_config(_BUILTIN, "<built-in dlsubmit defaults>")


def site_config(path: Path | None) -> SiteConfig:
    """The site config named on the command line, in $SLURM_DL_CONFIG, at /etc/slurm-dl/site.toml,
    or the built-in default."""
    chosen = find_config(path)
    return load_config(chosen) if chosen else builtin_site()


def user_defaults_path() -> Path:
    if os.environ.get("SLURM_DL_USER_DEFAULTS"):
        return Path(os.environ["SLURM_DL_USER_DEFAULTS"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "slurm-dl" / "dlsubmit.toml"


def parse_user_defaults(data: dict[str, Any], source: str) -> UserDefaults:
    problems: list[str] = []
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "env":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                problems.append('env: must be a table of NAME = "value" strings')
            else:
                values["env"] = tuple(sorted(value.items()))
            continue
        want = _USER_KEYS.get(key)
        if want is None:
            problems.append(f"{key}: unknown key; allowed: env, {', '.join(sorted(_USER_KEYS))}")
        elif not isinstance(value, want) or isinstance(value, bool):
            problems.append(f"{key}: got {value!r}; expected {want.__name__}")
        elif key == "launcher" and value not in ("auto", "torchrun", "none"):
            problems.append(f"launcher: got {value!r}; allowed: auto, torchrun, none")
        else:
            values[key] = value
    if problems:
        raise ConfigError(source, problems)
    return UserDefaults(**values)


def user_defaults() -> UserDefaults:
    """The user's defaults file if there is one; a bad file is an error naming the key."""
    path = user_defaults_path()
    if not path.exists():
        return UserDefaults()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(str(path), [f"cannot read dlsubmit defaults: {e}"]) from None
    return parse_user_defaults(data, str(path))
