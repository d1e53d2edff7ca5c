"""``slurm-dl prioritizer once|run`` and ``slurm-dl explain JOBID``.

The daemon's code lives in the top-level ``prioritizer`` package and the Slurm backend in
``slurm_dl.slurm``; both are imported when a command runs.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Optional

import typer

from slurm_dl.cli.backend_opt import BackendOpt, backend_name, build_backend
from slurm_dl.cli.common import expected_errors, fail, job_id_of
from slurm_dl.cli.daemon_opts import (
    LogFormatOpt,
    LogLevelOpt,
    MetricsPortOpt,
    raise_open_files_limit,
    setup_logging,
)
from slurm_dl.cli.daemon_opts import metrics_port as resolve_metrics_port
from slurm_dl.core.jobid import parse_job_ref
from slurm_dl.cli.config_file import ConfigOpt, DbOpt, config_path
from slurm_dl.core.database_url import database_url

app = typer.Typer(
    help="""The prioritizer daemon: scores, SiteFactor, preemption.

    \b
    Example:
      slurm-dl prioritizer once --dry-run
    """,
    no_args_is_help=True,
)

InitOpt = typer.Option(
    False,
    "--init",
    help="first start: create the store when the database is empty "
    "(else an empty or missing one is refused)",
)


ExplainPortOpt = typer.Option(
    None,
    "--explain-port",
    min=0,
    max=65535,
    help="serve the explain endpoint on this port (0: none, e.g. for a second "
    "daemon on one host; default: explain_port in the site config, else none)",
)


TOPOLOGY_TTL_S = 60.0
"""The daemon reads Slurm's switch tree at most once a minute (it changes on a reconfigure)."""


def _setup(
    config: Path,
    db: Optional[str],
    dry_run: bool = False,
    init: bool = False,
    backend_flag: Optional[str] = None,
):
    from prioritizer import Prioritizer
    from slurm_dl.cli.config_file import load_config
    from slurm_dl.store import Store

    cfg = load_config(config_path(config))
    # a database at another schema, an empty one (a wrong URL?) without init, stop here with the fix
    store = Store(database_url(cfg, db), create=init)
    backend = build_backend(cfg, backend_flag, topology_ttl_s=TOPOLOGY_TTL_S)
    backend.slurm_release()  # an unsupported Slurm release stops here, before any cycle
    return Prioritizer(cfg, backend, store, dry_run=dry_run)


def _lease(prio):
    """This daemon's claim to lead (see prioritizer.leader); its Slurm calls go through it."""
    from prioritizer.leader import FencedBackend
    from slurm_dl.store.lease import Lease

    lease = Lease(prio.store, prio.config.prioritizer.lease_seconds)
    prio.backend = FencedBackend(prio.backend, lease)
    return lease


def _rights_at_start(prio, log: logging.Logger) -> bool:
    """Whether this daemon's user may change jobs in Slurm, said at start: a user without
    operator rights gets "Invalid user id" on every update, and one the filter's shim does not
    trust has its GPU-type moves refused. Logs what to run; False only when it surely may not."""
    import os
    import pwd

    from slurm_dl.core.errors import SlurmError
    from slurm_dl.core.rights import startup_message, trust_problem
    from slurm_dl.slurm.accounts import slurm_user_of, user_rights
    from slurm_dl.slurm.controller import controller_config

    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        conf = controller_config()
        rights = user_rights(user, uid, controller=conf)
    except SlurmError as e:
        log.warning("cannot check this daemon's rights in Slurm: %s", str(e).splitlines()[0])
        return True
    if rights.ok is None:
        log.warning("cannot check this daemon's rights in Slurm: %s", rights.detail)
    elif not rights.ok:
        for line in startup_message(rights).splitlines():
            log.error("%s", line)
        return False
    if len(prio.config.gpu_types) > 1:
        trust = trust_problem(user, uid, prio.config.prioritizer.user, slurm_user_of(conf))
        if trust is not None:
            log.warning("%s", trust)
    return True


@app.command()
def once(
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="compute everything, change nothing"),
    as_json: bool = typer.Option(False, "--json", help="print the cycle report as JSON"),
    init: bool = InitOpt,
    backend: Optional[str] = BackendOpt,
) -> None:
    """Run one cycle and print what it did (or would do, with --dry-run).

    Like the daemon, refuses an empty or missing database unless --init.

    \b
    Example:
      slurm-dl prioritizer once --dry-run --json
    """
    with expected_errors():
        prio = _setup(config, db, dry_run, init=init, backend_flag=backend)
        lease = None
        if not dry_run:
            _rights_at_start(prio, logging.getLogger("slurm_dl.prioritizer"))
            lease = _lease(prio)
            if not lease.try_take():
                from slurm_dl.store.lease import read_lease

                row = read_lease(prio.store)
                who = row.who() if row is not None else "another prioritizer"
                raise fail(
                    f"{who} leads on this database: a cycle here would act beside it\n"
                    "  (stop it first, or look with --dry-run)"
                )
            prio.store.adopt_preemptions(time.time())
        try:
            report = prio.run_cycle()
        finally:
            if lease is not None:
                lease.release()
    if as_json:
        typer.echo(json.dumps(report.to_dict(), sort_keys=True))
    else:
        typer.echo(report.summary())
        for p in report.planned:
            typer.echo(f"  preempt {p['victims']} for job {p['need']}: {p['reason']}")
    if report.outcome == "failed":  # every change it asked of Slurm failed
        raise typer.Exit(1)


@app.command()
def run(
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    init: bool = InitOpt,
    max_cycles: Optional[int] = typer.Option(
        None, "--max-cycles", min=1, help="stop after N cycles (tests)"
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="log every cycle, not only actions"
    ),
    metrics_port: Optional[int] = MetricsPortOpt,
    explain_port: Optional[int] = ExplainPortOpt,
    log_level: str = LogLevelOpt,
    log_format: str = LogFormatOpt,
    backend: Optional[str] = BackendOpt,
) -> None:
    """Run a cycle every interval_seconds of [prioritizer] until SIGTERM or SIGINT.

    Two daemons on one database: one leads (holds the lease, acts), the
    other stands by and takes over when the leader stops renewing it.

    Refuses an empty or missing database (a wrong URL must not pass for
    the ledger): create the store first with slurm-dl db upgrade, or pass
    --init on the very first start.

    \b
    Example:
      slurm-dl db upgrade -c /etc/slurm-dl/site.toml   # once, first install
      slurm-dl prioritizer run -c /etc/slurm-dl/site.toml
    """
    setup_logging("slurm-dl-prioritizer", log_level, log_format)
    raise_open_files_limit()
    log = logging.getLogger("slurm_dl.prioritizer")
    with expected_errors():
        from prioritizer.loop import Loop

        prio = _setup(config, db, init=init, backend_flag=backend)
        if not _rights_at_start(prio, log):
            log.error("stopping (exit 1): without these rights no cycle could change anything")
            raise typer.Exit(1)
        metrics = None
        pc = prio.config.prioritizer
        port = resolve_metrics_port(metrics_port, pc.metrics_port)
        if port is not None:
            from prioritizer.metrics import PrioritizerMetrics
            from slurm_dl.daemon.metrics_http import serve_metrics

            metrics = PrioritizerMetrics(interval_s=pc.interval_seconds)
            server = serve_metrics(metrics.registry, port, pc.metrics_address)
            log.info("metrics on http://%s:%d/metrics", server.address, server.port)

        explain_at = pc.explain_port if explain_port is None else (explain_port or None)
        if explain_at is not None:
            from prioritizer.explain_server import ExplainServer
            from slurm_dl.store import Store

            url = database_url(prio.config, db)
            explainer = ExplainServer(
                lambda: Store(url, create=False),
                pc.explain_address,
                explain_at,
                pc.munge_socket,
                backend=prio.backend.name,
            )
            log.info(
                "explain endpoint on %s:%d (MUNGE; users see their own jobs)",
                explainer.address,
                explainer.port,
            )

        def on_report(r) -> None:
            if verbose or r.pushed_jobs or r.signalled or r.requeued:
                log.info(r.summary())
            else:
                log.debug(r.summary())

        if prio.store.created:
            log.warning("first start (--init): created an empty store at %s", prio.store.shown)
        log.info(
            "prioritizer started: Slurm %s (%s backend), interval %.1f s, store %s",
            prio.backend.slurm_release(),
            prio.backend.name,
            pc.interval_seconds,
            prio.store.shown,
        )
        from slurm_dl.daemon.process_memory import snapshot_on_signal

        if (where := snapshot_on_signal("prioritizer")) is not None:
            log.info("tracing allocations: SIGUSR1 writes a memory snapshot to %s", where)
        from prioritizer.leader import Leadership

        lease = _lease(prio)
        leadership = Leadership(lease, time.time)
        loop = Loop(
            prio, on_report=on_report, max_cycles=max_cycles, metrics=metrics, leadership=leadership
        )
        leadership.rebuild = loop.rebuild
        if metrics is not None:
            metrics.watch(leadership)
        lease.start_renewing()
        try:
            loop.run()
        finally:
            lease.release()
    if loop.exit_code:
        raise typer.Exit(loop.exit_code)


@app.command()
def reset(
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    all_pending: bool = typer.Option(
        False,
        "--all-pending",
        help="also every pending job with a non-zero SiteFactor the store "
        "does not know (a lost or replaced store)",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the jobs, change nothing"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
    backend: Optional[str] = BackendOpt,
) -> None:
    """Set every SiteFactor the prioritizer set back to 0 (to uninstall).

    Stop the daemon first, or its next cycle sets them again.

    \b
    Example:
      systemctl stop slurm-dl-prioritizer
      slurm-dl prioritizer reset
    """
    from prioritizer.reset import reset_site_factors
    from slurm_dl.cli.config_file import load_config
    from slurm_dl.store import Store

    with expected_errors():
        cfg = load_config(config_path(config))
        store = Store(
            database_url(cfg, db), create=False
        )  # an empty or missing one is named, not made
        report = reset_site_factors(
            build_backend(cfg, backend), store, all_pending=all_pending, dry_run=dry_run
        )
    if as_json:
        typer.echo(json.dumps(report.to_dict(), sort_keys=True))
    else:
        verb = "would reset" if dry_run else "reset"
        typer.echo(
            f"{verb} SiteFactor to 0 on {len(report.reset)} job(s)"
            f"{': ' + _ids(report.reset) if report.reset else ''}"
        )
        if report.gone:
            typer.echo(f"forgot {len(report.gone)} job(s) Slurm no longer has: {_ids(report.gone)}")
        for j, why in sorted(report.failed.items()):
            typer.echo(f"job {j}: not reset: {why}", err=True)
        if report.unknown:
            typer.echo(
                f"note: {len(report.unknown)} pending job(s) still carry a SiteFactor this store does "
                f"not know\n  (set by a lost or replaced store, or by hand): {_ids(report.unknown)};\n"
                "  to reset them too: slurm-dl prioritizer reset --all-pending",
                err=True,
            )
    if report.failed:
        raise typer.Exit(1)


def _ids(ids: list[int], shown: int = 10) -> str:
    head = ", ".join(map(str, ids[:shown]))
    return head + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def explain(
    job_id: str = typer.Argument(
        ...,
        metavar="JOBID",
        show_default=False,
        help="Slurm job id: 1234, an array task 1234_7 or a hetjob part 1234+0",
    ),
    config: Optional[Path] = ConfigOpt,
    db: Optional[str] = DbOpt,
    live: bool = typer.Option(
        True, "--live/--no-live", help="also ask Slurm for its start estimate and the free GPUs"
    ),
    as_json: bool = typer.Option(
        False, "--json", help="print the same numbers as JSON (ranks 1-based)"
    ),
    detail: bool = typer.Option(
        False,
        "--detail",
        help="also the tiers, each factor's score, the SiteFactor "
        "and the prioritizer's recent decisions about the job",
    ),
    via_prioritizer: bool = typer.Option(
        False,
        "--via-prioritizer",
        help="ask the prioritizer's explain endpoint (a user sees only their own jobs); "
        "the default when the store cannot be read here",
    ),
    backend: Optional[str] = BackendOpt,
) -> None:
    """Why a job has its place in the queue, and what would move it.

    Shows the job's place among waiting jobs and the GPUs ahead of it, what
    it waits for, when Slurm expects it to start, and what would help.
    --detail adds each priority factor's contribution, the step that orders
    it against its neighbours and the prioritizer's recent decisions.

    On a login node, where the prioritizer's store cannot be read, explain
    asks the prioritizer's explain endpoint ([prioritizer] explain_port),
    proving who you are with MUNGE; you see your own jobs.

    \b
    Examples:
      slurm-dl explain 1234
      slurm-dl explain 1234 --detail
      slurm-dl explain 1234 --json
      slurm-dl explain 1234_7
    """
    from slurm_dl.explain.query import NoRecord, NoWayToAsk, explanation, render_text

    with expected_errors():
        ref = parse_job_ref(job_id)
        jid = job_id_of(ref)
        named = f"job {jid}" if ref.plain else f"job {ref} (job {jid})"
        from slurm_dl.cli.config_file import load_config

        cfg = load_config(config_path(config))
        if live and backend_name(cfg, backend) == "pyslurm":
            build_backend(cfg, backend)  # a pyslurm that cannot load: an error, not a note
        try:
            doc = explanation(
                cfg, jid, db=db, via_prioritizer=via_prioritizer, live=live, backend=backend
            )
        except NoWayToAsk as e:
            raise fail(str(e)) from None
        except NoRecord:
            from slurm_dl.slurm.job_lookup import known_to_slurm

            if known_to_slurm(jid) is False:
                raise fail(
                    f"{named}: no such job (Slurm does not know it: ended a while ago,\n"
                    "  or never submitted)"
                ) from None
            raise fail(
                f"{named}: the prioritizer has not seen it yet (it looks at the queue\n"
                f"  every {cfg.prioritizer.interval_seconds:g} s); try again in a moment"
            ) from None
    if "tiers" in doc:  # the checkpoint its next start resumes from, in this user's records
        from slurm_dl.dlsubmit.status import resume_checkpoint
        from slurm_dl.explain.view import with_resume

        doc = with_resume(doc, resume_checkpoint(jid, doc.get("name")))
    if as_json:
        typer.echo(json.dumps(doc, sort_keys=True))
    else:
        typer.echo(render_text(doc, detail=detail))


def register(root: typer.Typer) -> None:
    """Entry point (``slurm_dl.commands``): add ``slurm-dl prioritizer …`` and ``slurm-dl explain``."""
    root.add_typer(app, name="prioritizer")
    root.command("explain")(explain)
