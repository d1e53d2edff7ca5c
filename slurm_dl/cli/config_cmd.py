"""``slurm-dl config check FILE``."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Optional

import typer

from ..core.cluster_match import compare, parse_slurm_cluster
from ..core.config import config_warnings
from .config_file import load_config
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
        None, "--slurm-conf", help="also compare the nodes, GPUs, partitions and time limits "
        "with this slurm.conf (and the gres.conf beside it), and SiteFactor's range with its "
        "PriorityWeight* (default: $SLURM_CONF when set)"),
) -> None:
    """Validate a site config; print a summary or every problem with its key path.

    With a slurm.conf, name every way the node groups, GPU types and counts,
    CPUs, memory, partitions and time limits differ from it (and gres.conf),
    each with its fix (exit 1), and warn when SiteFactor's range would swamp
    the site's own PriorityWeight* factors.

    \b
    Examples:
      slurm-dl config check /etc/slurm-dl/site.toml
      slurm-dl config check site.toml --slurm-conf /etc/slurm/slurm.conf
    """
    with expected_errors():
        cfg = load_config(file)
        conf_path = slurm_conf or (Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else None)
        slurm_settings = None
        diffs: list = []
        cluster = None
        if conf_path is not None:
            try:
                text = conf_path.read_text(errors="replace")
                gres = conf_path.with_name("gres.conf")
                gres_text = gres.read_text(errors="replace") if gres.is_file() else ""
            except OSError as e:
                raise fail(f"{conf_path}: cannot read it: {e.strerror or e}") from None
            slurm_settings = parse_slurm_conf(text)
            try:
                cluster = parse_slurm_cluster(text, gres_text)
            except ValueError as e:
                raise fail(f"{conf_path}: {e}") from None
            if cluster.nodes:
                diffs = compare(cfg, cluster)
    summary = (f"site {cfg.site.name!r}, {len(cfg.node_groups)} node group(s), {cfg.total_gpus} GPUs "
               f"({', '.join(cfg.gpu_type_names)}), policy {cfg.policy.mix}")
    if diffs:
        typer.echo(f"{file}: valid — {summary}")
        typer.echo(f"but it does not describe the cluster: {len(diffs)} difference(s) from")
        typer.echo(f"  {conf_path}:")
        for d in diffs:
            typer.echo(textwrap.fill(f"- {d.line()}", width=79, subsequent_indent="  ", break_on_hyphens=False))
            typer.echo(textwrap.fill(f"fix: {d.fix}", width=79, initial_indent="  ", subsequent_indent="    ",
                                     break_on_hyphens=False))
    else:
        typer.echo(f"{file}: OK — {summary}")
        if cluster is not None and cluster.nodes:
            typer.echo(f"matches {conf_path}: {len(cluster.nodes)} node(s), {len(cluster.partitions)} partition(s)")
        elif cluster is not None:
            typer.echo(f"note: {conf_path} has no NodeName lines (an Include?): nodes not compared")
    for line in throughput_lines(cfg):
        typer.echo(line)
    for line in config_warnings(cfg):
        typer.echo(textwrap.fill(f"warning: {line}", width=79, subsequent_indent="  "), err=True)
    if slurm_settings is not None:
        pc = cfg.prioritizer
        for line in swamp_warnings(pc.site_factor_max, pc.site_factor_levels, slurm_settings):
            typer.echo(textwrap.fill(f"warning: {conf_path}: {line}", width=79, subsequent_indent="  "), err=True)
    if diffs:
        raise typer.Exit(1)


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
