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

app = typer.Typer(help="""The prioritizer daemon: scores, SiteFactor, preemption.

    \b
    Example:
      slurm-dl prioritizer once --dry-run
    """, no_args_is_help=True)

ConfigOpt = typer.Option(None, "--config", "-c", help=CONFIG_HELP)


MAX_JOB_ID = 0xFFFFFFFD  # above: Slurm's NO_VAL and INFINITE


def _config_path(path: Optional[Path]) -> Path:
    """--config, else $SLURM_DL_CONFIG, else /etc/slurm-dl/site.toml (see slurm_dl.site_paths)."""
    return config_path(path)


DbOpt = typer.Option(None, "--db", help="SQLAlchemy URL of the store; overrides site.database_url")


def _setup(config: Path, db: Optional[str], dry_run: bool = False):
    from prioritizer import Prioritizer
    from slurm_dl.core.config import load_config
    from slurm_dl.slurm import CliBackend
    from slurm_dl.store import Store

    cfg = load_config(_config_path(config))
    store = Store(database_url(cfg, db))  # a database at another schema stops here, with the fix
    backend = CliBackend()
    backend.dialect()  # an unsupported Slurm release stops here, before any cycle
    return Prioritizer(cfg, backend, store, dry_run=dry_run)


@app.command()
def once(
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="compute everything, change nothing"),
    as_json: bool = typer.Option(False, "--json", help="print the cycle report as JSON"),
) -> None:
    """Run one cycle and print what it did (or would do, with --dry-run).

    \b
    Example:
      slurm-dl prioritizer once --dry-run --json
    """
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
    """Run a cycle every interval_seconds of [prioritizer] until SIGTERM or SIGINT.

    \b
    Example:
      slurm-dl prioritizer run -c /etc/slurm-dl/site.toml
    """
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


@app.command()
def reset(
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    all_pending: bool = typer.Option(False, "--all-pending",
                                     help="also every pending job with a non-zero SiteFactor the store "
                                          "does not know (a lost or replaced store)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the jobs, change nothing"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Set every SiteFactor the prioritizer set back to 0 (to uninstall).

    Stop the daemon first, or its next cycle sets them again.

    \b
    Example:
      systemctl stop slurm-dl-prioritizer
      slurm-dl prioritizer reset
    """
    from prioritizer.reset import reset_site_factors
    from slurm_dl.core.config import load_config
    from slurm_dl.slurm import CliBackend
    from slurm_dl.store import Store

    with expected_errors():
        cfg = load_config(_config_path(config))
        store = Store(database_url(cfg, db))
        report = reset_site_factors(CliBackend(), store, all_pending=all_pending, dry_run=dry_run)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), sort_keys=True))
    else:
        verb = "would reset" if dry_run else "reset"
        typer.echo(f"{verb} SiteFactor to 0 on {len(report.reset)} job(s)"
                   f"{': ' + _ids(report.reset) if report.reset else ''}")
        if report.gone:
            typer.echo(f"forgot {len(report.gone)} job(s) Slurm no longer has: {_ids(report.gone)}")
        for j, why in sorted(report.failed.items()):
            typer.echo(f"job {j}: not reset: {why}", err=True)
    if report.failed:
        raise typer.Exit(1)


def _ids(ids: list[int], shown: int = 10) -> str:
    head = ", ".join(map(str, ids[:shown]))
    return head + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def explain(
    job_id: int = typer.Argument(..., metavar="JOBID", help="Slurm job id"),
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    live: bool = typer.Option(True, "--live/--no-live",
                              help="also ask Slurm for its start estimate and the free GPUs"),
    as_json: bool = typer.Option(False, "--json", help="print the same numbers as JSON (ranks 1-based)"),
) -> None:
    """Why a job has its place in the queue, and what would move it.

    Shows the job's place among waiting jobs, each priority factor's
    contribution, which step orders it against its neighbours, Slurm's
    start estimate, its preemption state, and levers that would help.

    \b
    Examples:
      slurm-dl explain 1234
      slurm-dl explain 1234 --json
    """
    if not 1 <= job_id <= MAX_JOB_ID:
        raise fail(f"JOBID {job_id}: Slurm job ids run from 1 to {MAX_JOB_ID}")
    with expected_errors():
        from slurm_dl.core.config import load_config
        from slurm_dl.store import Store

        cfg = load_config(_config_path(config))
        url = database_url(cfg, db)
        path = sqlite_path(url)
        if path and not Path(path).exists():
            raise fail(f"no prioritizer store at {url} (is the prioritizer running with this config? see --db)")
        store = Store(url)
        expl = store.explanation(job_id)
        queue = store.explanations() if expl is not None else {}
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
    if expl is None or "factors" not in expl:
        if as_json:
            typer.echo(json.dumps({"job_id": job_id, "state": "GONE", "decisions": decisions,
                                   "preemptions": preemptions}, sort_keys=True))
            return
        typer.echo(f"job {job_id}: no longer waiting or running")
        for d in decisions:
            typer.echo(f"  {d['kind']}: {d['reason']}")
        return
    from slurm_dl.explain_view import explain_text, explain_view

    estimate, free, releases, live_note = _live_facts(job_id, expl) if live else (None, None, None,
                                                                                    "not asked (--no-live)")
    view = explain_view(expl, queue, estimate=estimate, preemptions=preemptions, free_gpus_per_node=free,
                        half_life_hours=cfg.policy.fairshare.half_life_hours, now=_now(), releases=releases)
    view["live"] = live_note
    if as_json:
        typer.echo(json.dumps({**view, "decisions": decisions, "preemptions": preemptions}, sort_keys=True))
    else:
        typer.echo(explain_text(view, decisions))
        if live_note != "ok":
            typer.echo(f"(Slurm: {live_note})")


def _now() -> float:
    import time

    return time.time()


def _live_facts(job_id: int, expl: dict) -> tuple[dict | None, list[int] | None, list | None, str]:
    """Slurm's start estimate for a waiting job, the free GPUs per node and when each node's
    running jobs end at their time limits; never fails."""
    from slurm_dl.core.errors import SlurmDLError
    from slurm_dl.slurm import CliBackend
    from slurm_dl.slurm.estimates import expected_starts

    try:  # a short timeout: explain answers from the store even when Slurm is slow or away
        backend = CliBackend(timeout=5.0)
        nodes = backend.nodes()
        running = [j for j in backend.jobs() if j.running] if expl.get("state") == "PENDING" else []
        starts = expected_starts([job_id]) if expl.get("state") == "PENDING" else {}
    except SlurmDLError as e:
        return None, None, None, f"not reachable ({str(e).splitlines()[0][:60]})"
    ends: dict[str, list[tuple[float, int]]] = {n.name: [] for n in nodes}
    for j in running:
        if j.start_time and j.time_limit and j.nodes:
            per_node = max(1, j.num_gpus // len(j.nodes))
            for name in j.nodes:
                ends.setdefault(name, []).append((j.start_time + j.time_limit, per_node))
    releases = [(n.gpus_free, ends.get(n.name, [])) for n in nodes if n.available]
    est = {"at": starts[job_id], "source": "slurm"} if job_id in starts else None
    return est, [n.gpus_free for n in nodes], releases, "ok"


def register(root: typer.Typer) -> None:
    """Entry point (``slurm_dl.commands``): add ``slurm-dl prioritizer …`` and ``slurm-dl explain``."""
    root.add_typer(app, name="prioritizer")
    root.command("explain")(explain)
