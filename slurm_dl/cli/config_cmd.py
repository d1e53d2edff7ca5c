"""``slurm-dl config check FILE``."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Optional

import typer

from ..core.config import config_warnings, load_config
from ..core.priority_weights import parse_slurm_conf, swamp_warnings
from ..core.throughput import ThroughputModel
from .common import expected_errors, fail

app = typer.Typer(help="""Site configuration files.

    \b
    Example:
      slurm-dl config check /etc/slurm-dl/site.toml
    """, no_args_is_help=True)


@app.command("check")
def check(
    file: Path = typer.Argument(..., help="site config TOML file"),
    slurm_conf: Optional[Path] = typer.Option(
        None, "--slurm-conf", help="also compare SiteFactor's range with this slurm.conf's "
        "PriorityWeight* (default: $SLURM_CONF when set)"),
) -> None:
    """Validate a site config; print a summary or every problem with its key path.

    With a slurm.conf, warn when SiteFactor's range would swamp the site's
    own PriorityWeight* factors.

    \b
    Examples:
      slurm-dl config check /etc/slurm-dl/site.toml
      slurm-dl config check site.toml --slurm-conf /etc/slurm/slurm.conf
    """
    with expected_errors():
        cfg = load_config(file)
        conf_path = slurm_conf or (Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else None)
        slurm_settings = None
        if conf_path is not None:
            try:
                slurm_settings = parse_slurm_conf(conf_path.read_text(errors="replace"))
            except OSError as e:
                raise fail(f"{conf_path}: cannot read it: {e.strerror or e}") from None
    typer.echo(
        f"{file}: OK — site {cfg.site.name!r}, {len(cfg.node_groups)} node group(s), "
        f"{cfg.total_gpus} GPUs ({', '.join(cfg.gpu_type_names)}), policy {cfg.policy.mix}"
    )
    for line in throughput_lines(cfg):
        typer.echo(line)
    for line in config_warnings(cfg):
        typer.echo(textwrap.fill(f"warning: {line}", width=79, subsequent_indent="  "), err=True)
    if slurm_settings is not None:
        pc = cfg.prioritizer
        for line in swamp_warnings(pc.site_factor_max, pc.site_factor_levels, slurm_settings):
            typer.echo(textwrap.fill(f"warning: {conf_path}: {line}", width=79, subsequent_indent="  "), err=True)


def throughput_lines(cfg) -> list[str]:
    """The throughput model's per-type table (under 80 columns): each type's default speed
    and what else the model knows there."""
    model = ThroughputModel.from_config(cfg)
    tp = cfg.throughput
    src = f"matrix {tp.matrix}" if tp.matrix else "no matrix"
    out = [f"throughput model ({src}; learnt speedups need {tp.min_samples} runs per type):",
           f"  {'type':<14}{'speed':>7}  evidence"]
    for name, speed, evidence in model.describe():
        line = f"  {name[:14]:<14}{speed:>7.3g}  {evidence}"
        out.append(line if len(line) < 80 else line[:78] + "…")
    return out
