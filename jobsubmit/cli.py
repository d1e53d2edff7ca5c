"""``slurm-dl filter``: run the job_submit filter service, install its shim, or check a job offline.

``serve`` and ``install`` drive the ``jobsubmit`` package (imported when the command runs, so the
rest of the CLI does not depend on it); ``check`` needs only the pure rules.
"""

from __future__ import annotations

import getpass
import json
import os
import time
from pathlib import Path
from typing import Optional

import typer

from slurm_dl.core.config import SiteConfig
from slurm_dl.cli.backend_opt import BackendOpt
from slurm_dl.cli.config_file import ConfigOpt, config_path, load_config
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.rules.sbatch_args import SbatchArgsError, SbatchJob, parse_sbatch_components
from slurm_dl.cli.common import expected_errors, fail
from slurm_dl.slurm.topology_view import slurm_leaf_nodes
from slurm_dl.cli.daemon_opts import (
    LogFormatOpt,
    LogLevelOpt,
    MetricsPortOpt,
    raise_open_files_limit,
    setup_logging,
)

app = typer.Typer(
    help="""The job_submit filter: serve, install, check.

    \b
    Example:
      slurm-dl filter check -- --gpus=16 -t 60
    """,
    no_args_is_help=True,
)


@app.command()
def serve(
    config: Optional[Path] = ConfigOpt,
    socket: Optional[str] = typer.Option(
        None, "--socket", help="socket path (default: filter.socket in the config)"
    ),
    owner: Optional[str] = typer.Option(
        None, "--owner", help="user that owns the socket (slurmctld's SlurmUser)"
    ),
    metrics_port: Optional[int] = MetricsPortOpt,
    log_level: str = LogLevelOpt,
    log_format: str = LogFormatOpt,
    backend: Optional[str] = BackendOpt,
) -> None:
    """Run the filter service in the foreground (SIGHUP reloads the config, SIGTERM stops).

    \b
    Example:
      slurm-dl filter serve -c /etc/slurm-dl/site.toml --owner slurm
    """
    from jobsubmit.service import serve as run_service

    setup_logging("slurm-dl-filter", log_level, log_format)
    raise_open_files_limit()
    with expected_errors():
        run_service(config_path(config), socket, owner, metrics_port, backend)


@app.command()
def install(
    config: Optional[Path] = ConfigOpt,
    slurm_conf_dir: Path = typer.Option(..., "--slurm-conf-dir", help="directory of slurm.conf"),
    socket: Optional[str] = typer.Option(
        None, "--socket", help="socket path (default: filter.socket in the config)"
    ),
    edit_slurm_conf: bool = typer.Option(
        True,
        "--edit-slurm-conf/--no-edit-slurm-conf",
        help="add JobSubmitPlugins=lua to slurm.conf if missing",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="install even when the site's job_submit.lua cannot be "
        "chained (it is kept as a backup, not run)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Write job_submit.lua next to slurm.conf with socket path, timeout and failure mode filled in.
    A site's own job_submit.lua is chained (both decide) and backed up.

    \b
    Example:
      slurm-dl filter install --slurm-conf-dir /etc/slurm
    """
    from jobsubmit.install import install as install_shim

    with expected_errors():
        cfg = load_config(config_path(config))
        result = install_shim(cfg, slurm_conf_dir, socket, edit_slurm_conf, force)
    out = {
        "shim": str(result.shim),
        "slurm_conf": str(result.slurm_conf),
        "slurm_conf_change": result.slurm_conf_change,
        "notes": list(result.notes),
    }
    if as_json:
        typer.echo(json.dumps(out))
        return
    typer.echo(
        f"wrote {result.shim} (socket {socket or cfg.filter.socket}, failure mode {cfg.filter.failure_mode})"
    )
    for note in result.notes:
        typer.echo(note)
    if result.slurm_conf_change:
        typer.echo(
            f"{result.slurm_conf}: {result.slurm_conf_change}; run `scontrol reconfigure` to load the plugin"
        )


@app.command("cli-filter")
def cli_filter() -> None:
    """Print slurm-dl's cli_filter.lua, which lets the filter see an sbatch --signal given on
    the command line (job_submit.lua cannot). Put it next to slurm.conf on every host users
    submit from, and add CliFilterPlugins=cli_filter/lua to that slurm.conf.

    \b
    Example:
      slurm-dl filter cli-filter > /etc/slurm/cli_filter.lua
    """
    from jobsubmit.install import CLI_FILTER

    typer.echo(CLI_FILTER.read_text(), nl=False)


@app.command()
def uninstall(
    slurm_conf_dir: Path = typer.Option(..., "--slurm-conf-dir", help="directory of slurm.conf"),
    force: bool = typer.Option(
        False,
        "--force",
        help="restore slurm.conf's backup even over later edits; "
        "a site script edited since install (job_submit_site.lua) becomes job_submit.lua",
    ),
) -> None:
    """Put back the site's job_submit.lua and slurm.conf as they were before install. Refuses, and
    says which file, when slurm.conf or the chained site script was edited since install.

    \b
    Example:
      slurm-dl filter uninstall --slurm-conf-dir /etc/slurm
    """
    from jobsubmit.install import uninstall as uninstall_shim

    with expected_errors():
        result = uninstall_shim(slurm_conf_dir, force)
    for action in result.actions:
        typer.echo(action)


def check_components(
    args: list[str],
    config: SiteConfig,
    *,
    user: str,
    now: float,
    deadline_jobs: int = 0,
    leaves: tuple[tuple[str, ...], ...] | None = None,
) -> tuple[SbatchJob, list]:
    """The job descriptions for sbatch ``args`` (one per component of a heterogeneous job) and the
    filter's decision on each, in order; later components get the first one's tag, as from the shim."""
    job = parse_sbatch_components(args, user_name=user, user_id=os.getuid(), now=now)
    ctx = FilterContext(now=now, user_deadline_jobs=deadline_jobs, leaf_nodes=leaves)
    decisions, leader_tag = [], None
    for desc in job.components:
        if desc.get("het_job_offset", 0) > 0 and leader_tag:
            desc["het_leader_tag"] = leader_tag
        decision = decide(desc, config, ctx)
        if desc.get("het_job_offset") == 0 and decision.accepted:
            leader_tag = decision.changes.get("admin_comment")
        decisions.append(decision)
    return job, decisions


def _verdict_json(desc: dict, decision) -> dict:
    return {
        "job": desc,
        "decision": decision.to_wire(),
        "class": decision.job_class and decision.job_class.value,
    }


def _print_decision(decision, prefix: str = "") -> None:
    if decision.accepted:
        cls = decision.job_class.value if decision.job_class else "-"
        typer.echo(f"{prefix}accept (class {cls})")
        for k, v in sorted(decision.changes.items()):
            typer.echo(f"  set {k} = {v!r}")
        for n in decision.notices:
            typer.echo(f"  note: {n}")
    else:
        typer.echo(f"{prefix}reject ({decision.rule}, code {decision.code})")
        typer.echo(f"  {decision.message}")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def check(
    args: list[str] = typer.Argument(None, help="sbatch arguments, after --"),
    config: Optional[Path] = ConfigOpt,
    user: Optional[str] = typer.Option(None, "--user", help="submitting user (default: you)"),
    deadline_jobs: int = typer.Option(
        0, "--deadline-jobs", help="pending deadline jobs the user already holds"
    ),
    as_json: bool = typer.Option(
        False, "--json", help="print the job description and decision as JSON"
    ),
) -> None:
    """Show what the filter would do to sbatch ARGS, without submitting. Every sbatch option is
    accepted; the ones the filter's decision does not depend on are listed on stderr (or under
    "ignored" with --json). Components of a heterogeneous job (split by ':') are checked one by one.

    \b
    Example:
      slurm-dl filter check -- --gpus=16 -t 60 --signal=B:USR2@90 --requeue
    """
    with expected_errors():
        cfg = load_config(config_path(config))
        try:
            job, decisions = check_components(
                list(args or []),
                cfg,
                user=user or getpass.getuser(),
                now=time.time(),
                leaves=slurm_leaf_nodes(cfg),
                deadline_jobs=deadline_jobs,
            )
        except SbatchArgsError as e:
            raise fail(str(e)) from None
    het = len(job.components) > 1
    if as_json:
        out = (
            {"components": [_verdict_json(d, dec) for d, dec in zip(job.components, decisions)]}
            if het
            else _verdict_json(job.components[0], decisions[0])
        )
        typer.echo(json.dumps({**out, "ignored": [i.option for i in job.ignored]}))
    else:
        for desc, decision in zip(job.components, decisions):
            _print_decision(decision, f"component {desc['het_job_offset']}: " if het else "")
        for item in job.ignored:
            typer.echo(item.line(), err=True)
    if any("deadline" in desc for desc in job.components):
        typer.echo(
            "  note: Slurm 22.05 does not show sbatch --deadline to job_submit.lua; for the live filter "
            "also give --comment=dl:deadline=YYYY-MM-DDTHH:MM",
            err=as_json,
        )
    if not all(d.accepted for d in decisions):
        raise typer.Exit(2)


def register(root: typer.Typer) -> None:
    """Entry point (``slurm_dl.commands``): add ``slurm-dl filter …``."""
    root.add_typer(app, name="filter")
