"""``slurm-dl config check FILE`` and ``slurm-dl config defaults``."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Optional

import typer

from ..core.cluster_match import compare, parse_slurm_cluster
from ..core.config import config_warnings
from ..core.config.reference import REQUIRED, TableDoc, reference
from .config_file import load_config
from ..core.priority_weights import parse_slurm_conf, swamp_warnings
from ..core.throughput import ThroughputModel
from .common import expected_errors, fail

app = typer.Typer(
    help="""Site configuration files.

    \b
    Examples:
      slurm-dl config check /etc/slurm-dl/site.toml
      slurm-dl config defaults
    """,
    no_args_is_help=True,
)


@app.command("check")
def check(
    file: Path = typer.Argument(..., help="site config TOML file"),
    slurm_conf: Optional[Path] = typer.Option(
        None,
        "--slurm-conf",
        help="also compare the nodes, GPUs, partitions and time limits "
        "with this slurm.conf (and the gres.conf beside it), and SiteFactor's range with its "
        "PriorityWeight* (default: $SLURM_CONF when set)",
    ),
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
        conf_path = slurm_conf or (
            Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else None
        )
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
    summary = (
        f"site {cfg.site.name!r}, {len(cfg.node_groups)} node group(s), {cfg.total_gpus} GPUs "
        f"({', '.join(cfg.gpu_type_names)}), policy {cfg.policy.mix}"
    )
    if diffs:
        typer.echo(f"{file}: valid — {summary}")
        typer.echo(f"but it does not describe the cluster: {len(diffs)} difference(s) from")
        typer.echo(f"  {conf_path}:")
        for d in diffs:
            typer.echo(
                textwrap.fill(
                    f"- {d.line()}", width=79, subsequent_indent="  ", break_on_hyphens=False
                )
            )
            typer.echo(
                textwrap.fill(
                    f"fix: {d.fix}",
                    width=79,
                    initial_indent="  ",
                    subsequent_indent="    ",
                    break_on_hyphens=False,
                )
            )
    else:
        typer.echo(f"{file}: OK — {summary}")
        if cluster is not None and cluster.nodes:
            typer.echo(
                f"matches {conf_path}: {len(cluster.nodes)} node(s), {len(cluster.partitions)} partition(s)"
            )
        elif cluster is not None:
            typer.echo(f"note: {conf_path} has no NodeName lines (an Include?): nodes not compared")
    for line in throughput_lines(cfg):
        typer.echo(line)
    for line in config_warnings(cfg):
        typer.echo(textwrap.fill(f"warning: {line}", width=79, subsequent_indent="  "), err=True)
    if slurm_settings is not None:
        pc = cfg.prioritizer
        for line in swamp_warnings(pc.site_factor_max, pc.site_factor_levels, slurm_settings):
            typer.echo(
                textwrap.fill(f"warning: {conf_path}: {line}", width=79, subsequent_indent="  "),
                err=True,
            )
    if diffs:
        raise typer.Exit(1)


def throughput_lines(cfg) -> list[str]:
    """The throughput model's per-type table (under 80 columns): each type's default speed
    and what else the model knows there."""
    model = ThroughputModel.from_config(cfg)
    tp = cfg.throughput
    src = f"matrix {tp.matrix}" if tp.matrix else "no matrix"
    out = [
        f"throughput model ({src}; learnt speedups need {tp.min_samples} runs per type):",
        f"  {'type':<14}{'speed':>7}  evidence",
    ]
    for name, speed, evidence in model.describe():
        line = f"  {name[:14]:<14}{speed:>7.3g}  {evidence}"
        out.append(line if len(line) < 80 else line[:78] + "…")
    return out


@app.command("defaults")
def defaults() -> None:
    """Print every setting of the site config: what it does, what it allows
    and its default.

    The output is itself a site config of the defaults (TOML), each key
    with its meaning as a comment. Keys shown as comments are unset by
    default, or belong to the entries of a [[list]] that has none. A
    site's own file names only what it changes.

    \b
    Examples:
      slurm-dl config defaults
      slurm-dl config defaults | less
    """
    typer.echo(defaults_text(), nl=False)


DEFAULTS_HEAD = """\
# Every setting of a slurm-dl site config: what it does, what it allows and its
# default. A site's file names only the settings it changes (an unknown key is
# an error). Check a file with: slurm-dl config check FILE"""


def defaults_text(width: int = 79) -> str:
    """``config defaults``: the reference as commented TOML (itself a config of the defaults)."""
    out = [DEFAULTS_HEAD]
    shown_keys: set[str] = set()  # [classes.NAME]: each key explained once
    for table in reference():
        out.append("")
        _table_lines(out, table, shown_keys, width)
    return "\n".join(out) + "\n"


def _table_lines(out: list[str], table: TableDoc, shown_keys: set[str], width: int) -> None:
    family = table.path.rsplit(".", 1)[0] if table.path.startswith("classes.") else table.path
    if table.array:
        out.append(f"# [[{table.path}]]")
        default = f" Default: {table.default}." if table.default else " Default: none."
        out.extend(_comment(table.description + "." + default, width))
    else:
        out.append(f"[{table.path}]")
        if table.description:
            out.extend(_comment(table.description, width))
        elif any(f"{family}.{k.key}" in shown_keys for k in table.keys):
            out.extend(_comment("the keys above, with this class's defaults", width))
    for key in table.keys:
        name = f"{family}.{key.key}"
        if name not in shown_keys:
            out.append("")
            if key.description:
                out.extend(_comment(key.description, width))
            out.extend(_comment(f"allowed: {key.allowed}", width))
            shown_keys.add(name)
        value = (
            "(required)"
            if key.default is REQUIRED
            else "(unset)"
            if key.default is None
            else key.default
        )
        commented = table.array or key.default is None or key.default is REQUIRED
        out.append(f"{'# ' if commented else ''}{key.key} = {value}")


def _comment(text: str, width: int) -> list[str]:
    return textwrap.wrap(
        text,
        width,
        initial_indent="# ",
        subsequent_indent="# ",
        break_long_words=False,
        break_on_hyphens=False,
    )
