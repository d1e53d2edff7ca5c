"""``slurm-dl config check FILE``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import typer

from ..config import config_warnings, load_config
from .common import expected_errors

app = typer.Typer(help="""Site configuration files.

    \b
    Example:
      slurm-dl config check /etc/slurm-dl/site.toml
    """, no_args_is_help=True)


@app.command("check")
def check(file: Path = typer.Argument(..., help="site config TOML file")) -> None:
    """Validate a site config; print a summary or every problem with its key path.

    \b
    Example:
      slurm-dl config check /etc/slurm-dl/site.toml
    """
    with expected_errors():
        cfg = load_config(file)
    typer.echo(
        f"{file}: OK — site {cfg.site.name!r}, {len(cfg.node_groups)} node group(s), "
        f"{cfg.total_gpus} GPUs ({', '.join(cfg.gpu_type_names)}), policy {cfg.policy.mix}"
    )
    for line in config_warnings(cfg):
        typer.echo(textwrap.fill(f"warning: {line}", width=79, subsequent_indent="  "), err=True)
