"""``slurm-dl prioritizer once|run`` and ``slurm-dl explain JOBID``.

The daemon's code lives in the top-level ``prioritizer`` package and the Slurm backend in
``slurm_dl.slurm``; both are imported when a command runs.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

import typer

from slurm_dl.cli.common import expected_errors, fail
from slurm_dl.cli.daemon_opts import LogFormatOpt, LogLevelOpt, MetricsPortOpt, setup_logging
from slurm_dl.cli.daemon_opts import metrics_port as resolve_metrics_port
from slurm_dl.site_paths import CONFIG_HELP, config_path, database_url, sqlite_path

app = typer.Typer(help="The prioritizer daemon: scores, SiteFactor, preemption.", no_args_is_help=True)

ConfigOpt = typer.Option(None, "--config", "-c", help=CONFIG_HELP)


def _config_path(path: Optional[Path]) -> Path:
    """--config, else $SLURM_DL_CONFIG, else /etc/slurm-dl/site.toml (see slurm_dl.site_paths)."""
    return config_path(path)


DbOpt = typer.Option(None, "--db", help="SQLAlchemy URL of the store; overrides site.database_url")


def _setup(config: Path, db: Optional[str], dry_run: bool = False):
    from prioritizer import Prioritizer
    from slurm_dl.config import load_config
    from slurm_dl.slurm import CliBackend
    from slurm_dl.store import Store

    cfg = load_config(_config_path(config))
    backend = CliBackend()
    backend.dialect()  # an unsupported Slurm release stops here, before any cycle
    store = Store(database_url(cfg, db))
    return Prioritizer(cfg, backend, store, dry_run=dry_run)


@app.command()
def once(
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="compute everything, change nothing"),
    as_json: bool = typer.Option(False, "--json", help="print the cycle report as JSON"),
) -> None:
    """Run one cycle and print what it did (or would do, with --dry-run)."""
    with expected_errors():
        report = _setup(config, db, dry_run).run_cycle()
    if as_json:
        typer.echo(json.dumps(report.to_dict(), sort_keys=True))
    else:
        typer.echo(report.summary())
        for p in report.planned:
            typer.echo(f"  preempt {p['victims']} for job {p['need']}: {p['reason']}")


@app.command()
def run(
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    max_cycles: Optional[int] = typer.Option(None, "--max-cycles", min=1, help="stop after N cycles (tests)"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="log every cycle, not only actions"),
    metrics_port: Optional[int] = MetricsPortOpt,
    log_level: str = LogLevelOpt,
    log_format: str = LogFormatOpt,
) -> None:
    """Run the cycle every prioritizer.interval_seconds until SIGTERM/SIGINT."""
    setup_logging("slurm-dl-prioritizer", log_level, log_format)
    log = logging.getLogger("slurm_dl.prioritizer")
    with expected_errors():
        from prioritizer.loop import Loop

        prio = _setup(config, db)
        metrics = None
        pc = prio.config.prioritizer
        port = resolve_metrics_port(metrics_port, pc.metrics_port)
        if port is not None:
            from prioritizer.metrics import PrioritizerMetrics
            from slurm_dl.metrics_http import serve_metrics

            metrics = PrioritizerMetrics()
            server = serve_metrics(metrics.registry, port, pc.metrics_address)
            log.info("metrics on http://%s:%d/metrics", server.address, server.port)

        def on_report(r) -> None:
            if verbose or r.pushed_jobs or r.signalled or r.requeued:
                log.info(r.summary())
            else:
                log.debug(r.summary())

        log.info("prioritizer started: Slurm %s, interval %.1f s, store %s", prio.backend.slurm_release(),
                 pc.interval_seconds, prio.store.url)
        Loop(prio, on_report=on_report, max_cycles=max_cycles, metrics=metrics).run()


def explain(
    job_id: int = typer.Argument(..., help="Slurm job id"),
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    as_json: bool = typer.Option(False, "--json", help="print the explanation as JSON"),
) -> None:
    """Why a job has its priority and, when waiting, what it waits for (from the daemon's store)."""
    with expected_errors():
        from slurm_dl.config import load_config
        from slurm_dl.explain import render_explanation
        from slurm_dl.store import Store

        cfg = load_config(_config_path(config))
        url = database_url(cfg, db)
        path = sqlite_path(url)
        if path and not Path(path).exists():
            raise fail(f"no prioritizer store at {url} (has `slurm-dl prioritizer run` used it? see --db)")
        store = Store(url)
        expl = store.explanation(job_id)
        decisions = [
            {"at": d.at, "kind": d.kind, "value": d.value, "reason": d.reason} for d in store.decisions(job_id)
        ]
        preemptions = [
            {"victim": p.victim_job_id, "need": p.need_job_id, "state": p.state, "signalled_at": p.signalled_at,
             "reason": p.reason}
            for p in store.preemptions(victim=job_id)
        ]
    if expl is None and not decisions and not preemptions:
        raise fail(f"job {job_id}: the prioritizer has no record of it in {store.url} (not seen by a cycle yet?)")
    if expl is None:
        expl = {"job_id": job_id, "state": "GONE", "note": "no longer pending or running"}
    if as_json:
        typer.echo(json.dumps({**expl, "decisions": decisions, "preemptions": preemptions}, sort_keys=True))
    elif "factors" in expl:
        typer.echo(render_explanation(expl, decisions))
    else:
        typer.echo(f"job {job_id}: no longer pending or running")
        for d in decisions:
            typer.echo(f"  t={d['at']:.0f} {d['kind']}: {d['reason']}")


def register(root: typer.Typer) -> None:
    """Entry point (``slurm_dl.commands``): add ``slurm-dl prioritizer …`` and ``slurm-dl explain``."""
    root.add_typer(app, name="prioritizer")
    root.command("explain")(explain)
