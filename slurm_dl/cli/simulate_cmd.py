"""``slurm-dl simulate``: replay a trace through one or more policies and compare them."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import typer

from ..core.errors import SlurmDLError, TraceError
from . import simulate_out as out
from .common import expected_errors
from .simulate_out import finite  # noqa: F401  (tests and callers import it from here)

HELP = """Replay a GPU-cluster trace through scheduling policies, side by side.

The policies are the prioritizer's own code; the options below override the
settings they read from --config.

\b
Policies:
  fifo             first come, first served; the head of the queue blocks
  fifo-firstfit    FIFO; a later job starts when the head does not fit
  fifo-backfill    EASY backfill, like Slurm's
  sjf, srtf        shortest job / remaining time first (know durations:
                   simulator only)
  las              least attained service (--las-thresholds, --starvation)
  las-tiresias     LAS with Tiresias' thresholds 3250/7200/18000 GPU-s
  gittins          Gittins index (--gittins-prior, plus finished jobs)
  fairshare        finish-time fair share: accounts below their share take
                   GPUs back from checkpointable jobs whose lease is over
                   (shares, lease_seconds from --config); LAS within
  fairshare-queue  fair share by queue order only (no preemption)
  deadline         deadline boost (--deadline-boost); deadline-las: then LAS
  qssf, class, combined (tiers from --config)
  site             each --config's own [policy] mix (the deployed policy)

Sweeps: repeat --las-thresholds; each value adds a run named las[T1,T2,...].

Idle GPUs: --idle-policy replays the [telemetry] idle policy of --config on
per-job GPU utilisation: the trace's gpu_util column, --utilisation FILE (CSV
job_id,gpu_util) or --synthetic-idle FRACTION[:SEED] (made up, for demos).
Each policy then reports idle GPU-hours, GPU-hours reclaimed and jobs warned
or cancelled; --idle-report FILE writes the per-job verdicts as CSV.

Your own history: --format sacct-json reads `sacct --json`; --format sacct
reads `sacct -P` exported with exactly the fields below, times in UTC;
--format helios reads a Helios-style CSV (job_id, user, vc, jobname, gpu_num,
cpu_num, node_num, state, submit_time, start_time, end_time, duration). Steps
are folded into their jobs, requeued records merged, jobs that never started
counted but not replayed, CPU-only jobs dropped unless --keep-cpu-jobs.

\b
Exporting the history (set -S to the period you want):
  sacct -a --duplicates -S 2024-01-01 -E now --json > history.json
  F=JobID,JobIDRaw,User,Account,Partition,JobName,State,Submit,Start
  F=$F,End,Elapsed,Timelimit,AllocTRES,ReqTRES,AdminComment
  TZ=UTC sacct -a -P --duplicates -S 2024-01-01 -E now -o $F > history.txt

Scheduler overheads: a replay starts a job the moment GPUs are free; a live
Slurm starts it after the last job completes and the next scheduling pass.
--dispatch auto measures that gap in the imported history (GPUs free to the
next start, median) and replays with it; --dispatch auto:2 leaves half of a
2 s pass period (Slurm's sched_interval / bf_interval) to the passes;
--dispatch 1.5[:2] sets it. Off by default. --slurm-backfill replays what a
live cluster does when no job opted in to preemption: no preemption, and
Slurm's backfill starts jobs in each policy's order (from the jobs' time
limits), instead of the policy's own discipline.

Who may be preempted: in sacct histories, the filter's tag in each job's
admin comment says which jobs opted in; the replay never preempts the others,
as the prioritizer would not. --opt-in all: as if every job checkpointed;
--opt-in none: no job opted in. Other traces: every job opted in.

Site configs: --config replays the site's deployed settings (cluster size,
LAS thresholds, fair-share shares, the restart delay of a preemption); give
it twice (--config current.toml --config proposed.toml) to see each policy
under both, side by side. --report DIR writes DIR/index.html: the table,
JCT, queueing and utilisation figures, per-account waits; it needs no
network to open.

GPU types: --node-types v100:15,p100:15,k80:15 (TYPE:NODES in node order,
--gpus-per-node each), --fleet FILE (a row per node: gpu, model), a --config
whose node groups have several types, or --cluster-from-slurm. Each job runs
at its speed on the type it got: --throughputs FILE (Gavel's JSON or a CSV
kind,TYPE1,...; a job naming no model gets one drawn with --model-seed; its
duration is its run time on its fastest type). --type-choice blind (Slurm's
first free GPUs), fastest, or aware (the default: each type to the jobs that
gain most from it). Service is charged at the type's speed; the table adds
each type's busy share.

Speed: the replays (each policy's, and its fairness runs) run on every core
(--jobs N; --jobs 1: one after the other), or with --via-slurm as one Slurm
job array (--partition, --time); the output is the same.

Table: JCT is job completion time (submit to end); rho (ρ) is an account's mean
JCT here over its mean JCT alone on its share of the cluster (1 = fair, max =
the worst account); Jain is Jain's index of the rhos (1 = all equal).

\b
Example (Philly, each virtual cluster on its own):
  slurm-dl simulate --trace traces/philly/philly.csv --format philly \\
    --cluster-per-vc traces/philly/vc_sizes.csv --gpus-per-node 8 \\
    --start 2017-10-01 --end 2017-12-01 --preempt-cost 60 \\
    --policy fifo --policy srtf
"""


SITE_POLICY = "site"  # --policy site: each config's own [policy] mix
SITE_GROUP = "\0site"  # its rows' group in the table (no policy label can be this)


def _thresholds(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise SlurmDLError(f"--las-thresholds: got {text!r}; allowed: increasing GPU-seconds like 3250,7200,18000")
    if not vals or any(v <= 0 or not math.isfinite(v) for v in vals) or any(b <= a for a, b in zip(vals, vals[1:])):
        raise SlurmDLError(f"--las-thresholds: got {text!r}; allowed: positive, strictly increasing GPU-seconds")
    return vals


OPT_IN = ("recorded", "all", "none")


def _apply_opt_in(jobs, opt_in: str, as_json: bool) -> None:
    """``--opt-in``: who the replay may preempt. ``recorded`` keeps what the trace says (a
    sacct history: the filter's tag; public traces: every job); ``all`` asks what preemption
    would do if every job checkpointed; ``none`` replays preemptive policies without victims."""
    if opt_in == "recorded":
        return
    for j in jobs:
        j.checkpointable = opt_in == "all"
        j.requeue = True if opt_in == "all" else None
    typer.echo(f"--opt-in {opt_in}: {'every' if opt_in == 'all' else 'no'} job taken as opted in to preemption", err=as_json)


def _default_prior(trace: Path) -> Path | None:
    for cand in (trace.parent.parent / "tiresias" / "yarn-gput1000.csv",
                 Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "tiresias" / "yarn-gput1000.csv"):
        if cand.is_file():
            return cand
    return None


def simulate(
    trace: Path = typer.Option(..., "--trace", help="trace file"),
    fmt: str = typer.Option("philly", "--format", help="philly | chronus | tiresias | csv | openb | sacct-json | sacct | helios"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="skip and count records that cannot be read"),
    keep_cpu: bool = typer.Option(False, "--keep-cpu-jobs", help="sacct/helios: replay CPU-only jobs (0 GPUs)"),
    group_by: str = typer.Option("account", "--group-by", help="sacct/helios: account | partition as the groups"),
    policy: List[str] = typer.Option(["fifo"], "--policy", help="policy name; repeat to compare side by side"),
    cluster_per_vc: Optional[Path] = typer.Option(None, "--cluster-per-vc", help="CSV vc,nodes: each VC its own cluster"),
    nodes: Optional[int] = typer.Option(None, "--nodes", min=1, help="one shared cluster of this many nodes"),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", min=1, help="GPUs per node (default 8 or the site config)"),
    config: List[Path] = typer.Option([], "--config", help="site config TOML: cluster shape, LAS thresholds, preemption; twice: side by side"),
    start: Optional[str] = typer.Option(None, "--start", help="keep jobs submitted at or after (YYYY-MM-DD[ HH:MM:SS] or seconds)"),
    end: Optional[str] = typer.Option(None, "--end", help="keep jobs submitted before this time"),
    preempt_cost: Optional[str] = typer.Option(None, "--preempt-cost", help="restart cost in seconds, or 'helios' (7 s 1 GPU, 30 s 2-8, 60 s above); default: --config's [preemption], else 0"),
    checkpoint_interval: Optional[float] = typer.Option(None, "--checkpoint-interval", min=1, help="lose work since the last periodic checkpoint (s)"),
    las_thresholds: List[str] = typer.Option([], "--las-thresholds", help="LAS thresholds in GPU-s, comma-separated; repeat to sweep"),
    starvation: Optional[float] = typer.Option(None, "--starvation", min=0.0, help="LAS starvation guard S (promote after S x executed time)"),
    gittins_prior: Optional[Path] = typer.Option(None, "--gittins-prior", help="CSV with a 'duration' column of GPU-seconds"),
    deadline_boost: Optional[float] = typer.Option(None, "--deadline-boost", min=1.0, help="deadline, deadline-las: boost when slack < this (s); default from --config, else 3600"),
    spread: bool = typer.Option(False, "--spread", help="let jobs spread over extra nodes when they do not fit consolidated (slower, chronus/model_info.json)"),
    model_info: Optional[Path] = typer.Option(None, "--model-info", help="placement-sensitivity table (chronus/model_info.json)"),
    no_fairness: bool = typer.Option(False, "--no-fairness", help="skip the isolated runs that give rho (shared cluster)"),
    idle_policy: bool = typer.Option(False, "--idle-policy", help="what the [telemetry] idle policy would reclaim (needs utilisation)"),
    idle_action: Optional[str] = typer.Option(None, "--idle-action", help="override [telemetry] idle_action: report | warn | deprioritize | cancel"),
    utilisation: Optional[Path] = typer.Option(None, "--utilisation", help="CSV job_id,gpu_util: per-job GPU utilisation (implies --idle-policy)"),
    synthetic_idle: Optional[str] = typer.Option(None, "--synthetic-idle", help="SYNTHETIC utilisation FRACTION[:SEED] for jobs without any (implies --idle-policy)"),
    idle_report: Optional[Path] = typer.Option(None, "--idle-report", help="write the idle policy's per-job verdicts (CSV) to FILE"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="write JCT CDF and queue-length plots into DIR"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar on stderr"),
    from_slurm: bool = typer.Option(False, "--cluster-from-slurm", help="nodes and GPUs per node of the live cluster (sinfo)"),
    report: Optional[Path] = typer.Option(None, "--report", help="write a self-contained HTML report, DIR/index.html"),
    dispatch: Optional[str] = typer.Option(None, "--dispatch", help="scheduler overheads: auto[:PASS] (from the history) or RELEASE[:PASS] seconds"),
    slurm_backfill: bool = typer.Option(False, "--slurm-backfill", help="no preemption: Slurm's backfill starts jobs in each policy's order"),
    opt_in: str = typer.Option("recorded", "--opt-in", help="jobs that may be preempted: recorded (sacct: the filter's tag; other traces: all) | all | none"),
    node_types: Optional[str] = typer.Option(None, "--node-types", help="node groups of GPU types in node order, TYPE:NODES,... e.g. v100:15,p100:15,k80:15 (--gpus-per-node each, default 8)"),
    fleet: Optional[Path] = typer.Option(None, "--fleet", help="fleet CSV, one row per node with gpu and model (openb_node_list_gpu_node.csv)"),
    throughputs: Optional[Path] = typer.Option(None, "--throughputs", help="speed of each model on each GPU type: Gavel's simulation_throughputs.json or a CSV kind,TYPE1,TYPE2,..."),
    model_seed: Optional[int] = typer.Option(None, "--model-seed", help="seed of the model drawn from --throughputs for each job that names none (default 0)"),
    type_choice: Optional[str] = typer.Option(None, "--type-choice", help="on several GPU types: blind (first free, node order: Slurm's --gpus=N) | fastest (the job's fastest free type) | aware (default)"),
    workers: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="replays run in this many processes at once (default: every core; 1: one after the other); the output is the same"),
    via_slurm: bool = typer.Option(False, "--via-slurm", help="run the replays as one Slurm job array (CPU-only tasks; a private work folder in the current directory, removed after)"),
    partition: Optional[str] = typer.Option(None, "--partition", help="--via-slurm: the partition of the array (default: the site config's [simulate] partition, else Slurm's default)"),
    time_limit: Optional[str] = typer.Option(None, "--time", help="--via-slurm: each task's time limit, minutes or H:MM:SS (default: [simulate] time_minutes, 60)"),
    placement: List[str] = typer.Option([], "--placement", help="GPU sharing (openb, with --fleet): exclusive | dotprod | bestfit | fgd; repeat to compare; fills the fleet with the trace's tasks"),
    seed: int = typer.Option(0, "--seed", help="--placement: seed of the tasks' order and draws and of the nodes' order for ties"),
) -> None:
    if placement:
        from .simulate_sharing import run_sharing
        with expected_errors():
            run_sharing(trace, fmt, fleet, placement, seed, as_json)
        return
    args = dict(locals())
    del args["placement"], args["seed"]
    with expected_errors():
        _run(**args)


def _run(trace, fmt, skip_bad, keep_cpu, group_by, policy, cluster_per_vc, nodes, gpus_per_node, config, start, end, preempt_cost,
         checkpoint_interval, las_thresholds, starvation, gittins_prior, deadline_boost, spread, model_info,
         no_fairness, idle_policy, idle_action, utilisation, synthetic_idle, idle_report, as_json, plot,
         quiet=False, from_slurm=False, report=None, dispatch=None, slurm_backfill=False,
         opt_in="recorded", node_types=None, fleet=None, throughputs=None, model_seed=None,
         type_choice=None, workers=None, via_slurm=False, partition=None, time_limit=None) -> None:
    from ..sim.ranking.ranker import load_prior, make_ranker
    from ..sim.workloads.traces import HISTORY_FORMATS, parse_time
    from ..sim.whatif.speeds import TypesAsked

    configs = list(config or []) if not isinstance(config, Path) else [config]
    if opt_in not in OPT_IN:  # before a long trace is read, not after
        raise SlurmDLError(f"--opt-in: got {opt_in!r}; allowed: {', '.join(OPT_IN)}")
    try:
        t0 = parse_time(start) if start else None
        t1 = parse_time(end) if end else None
    except ValueError as e:
        raise SlurmDLError(str(e)) from None
    try:
        asked = TypesAsked.check(node_types=node_types, fleet=fleet, throughputs=throughputs, model_seed=model_seed,
                                 type_choice=type_choice, nodes=nodes, cluster_per_vc=cluster_per_vc,
                                 from_slurm=from_slurm)
    except ValueError as e:
        raise SlurmDLError(str(e)) from None
    cluster_line = live = None
    if from_slurm:
        if nodes is not None or cluster_per_vc:
            raise SlurmDLError("--cluster-from-slurm: give it instead of --nodes / --cluster-per-vc")
        nodes, gpus_per_node, cluster_line, live = _live_cluster(gpus_per_node)
        typer.echo(_wrap(cluster_line), err=as_json)
    jobs, imported, described = _read_jobs(trace, fmt, t0, t1, keep_cpu=keep_cpu, skip_bad=skip_bad,
                                           group_by=group_by, as_json=as_json)
    if not jobs:
        raise TraceError(f"{trace}: no jobs submitted in the window [{start}, {end})")
    _apply_opt_in(jobs, opt_in, as_json)
    drawn = asked.draw(jobs)
    if drawn:
        typer.echo(_wrap(drawn), err=as_json)
    if report:  # find out now, not after a long replay, that the report cannot be written
        try:
            Path(report).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SlurmDLError(f"--report: cannot write {report}: {e.strerror or e}") from None
    wants_idle = bool(idle_policy or idle_action or utilisation or synthetic_idle or idle_report)
    variants = [_variant(path, label, jobs, nodes=nodes, gpus_per_node=gpus_per_node, cluster_per_vc=cluster_per_vc,
                         preempt_cost=preempt_cost, checkpoint_interval=checkpoint_interval,
                         las_thresholds=las_thresholds, starvation=starvation, spread=spread, model_info=model_info,
                         no_fairness=no_fairness, idle=wants_idle, idle_action=idle_action, utilisation=utilisation,
                         synthetic_idle=synthetic_idle, cluster_line=cluster_line, asked=asked, live=live,
                         recorded=fmt in HISTORY_FORMATS)
                for path, label in (zip(configs, _config_labels(configs)) if configs else [(None, None)])]
    several = len(variants) > 1
    overhead = _setup_lines(asked, variants, dispatch, fmt, jobs, as_json)
    if slurm_backfill:
        typer.echo("placement: Slurm's backfill in each policy's order, no preemption", err=as_json)
    if idle_report and variants[0].idle is not None:
        _write_idle_report(idle_report, jobs, variants[0].idle["outcomes"])
        typer.echo(f"wrote {idle_report}", err=as_json)
    prior_path = gittins_prior or _default_prior(trace)
    prior = load_prior(prior_path) if prior_path and "gittins" in policy else []
    from ..sim.whatif.progress import Progress

    planned = _plan(policy, variants, configs, several, make_ranker)
    via = None
    if via_slurm:
        from ..slurm.sim_array import parse_time_limit
        first = variants[0].cfg  # the first --config's [simulate] gives the defaults
        sc = getattr(first, "simulate", None)
        via = (partition or (sc.partition if sc else None),
               parse_time_limit(time_limit) if time_limit else (sc.time_minutes if sc else parse_time_limit(None)))
    elif partition or time_limit:
        raise SlurmDLError("--partition, --time: only with --via-slurm")
    from ..sim.reports.metrics import recorded_figures

    recorded = recorded_figures(jobs) if fmt in HISTORY_FORMATS else None
    runs, interrupted, failed = _replay(planned, jobs, variants, trace, prior=prior, deadline_boost=deadline_boost,
                                        slurm_backfill=slurm_backfill,
                                        progress=Progress(enabled=not (quiet or as_json)), as_json=as_json,
                                        workers=workers, keep_results=bool(plot or report), via_slurm=via,
                                        recorded=recorded)
    ran = {r.planned for r in runs}
    not_run = [p[0] if not several else f"{p[0]} @ {p[3].label}" for k, p in enumerate(planned) if k not in ran]
    if plot and runs:
        from ..sim.reports.plots import write_plots
        for written in write_plots(plot, [(r.name, r.results) for r in runs]) or []:
            typer.echo(f"wrote {written}", err=as_json)
    if report and runs:
        meta = _report_meta(trace, fmt, jobs, imported and {**imported, "describe": described}, variants, runs,
                            no_fairness, interrupted, not_run)
        meta["recorded"] = recorded
        _write_report(report, runs, meta, as_json)
    doc = _doc(variants, runs, several, imported=imported, overhead=overhead, slurm_backfill=slurm_backfill,
               interrupted=interrupted, not_run=not_run)
    if failed:
        doc["policies_not_run"] = not_run
    if recorded is not None:
        doc["recorded"] = recorded
    if as_json:
        typer.echo(json.dumps(finite(doc), sort_keys=False, allow_nan=False))
    elif runs:
        out.table_foot({"policies": {r.name: r.summary for r in runs}, "recorded": recorded})
    if interrupted:
        raise typer.Exit(130)
    if failed:
        raise typer.Exit(1)


def _read_jobs(trace, fmt, t0, t1, *, keep_cpu, skip_bad, group_by, as_json) -> tuple[list, dict | None, str | None]:
    """The trace's jobs in ``[t0, t1)``; for a history also what the import found (a dict and
    a line, shown)."""
    from ..sim.workloads.traces import HISTORY_FORMATS, read_history, read_trace

    if fmt not in HISTORY_FORMATS:
        return read_trace(trace, fmt, t0, t1), None, None
    jobs, stats = read_history(trace, fmt, keep_cpu=keep_cpu, skip_bad=skip_bad, group=group_by)
    jobs = [j for j in jobs if (t0 is None or j.submit_time >= t0) and (t1 is None or j.submit_time < t1)]
    described = stats.describe()
    typer.echo(_wrap(f"{trace.name}: {described}"), err=as_json)
    for ex in stats.bad_examples:
        typer.echo(f"  skipped {ex}", err=as_json)
    return jobs, {"format": fmt, **{k: v for k, v in vars(stats).items()}}, described


def _setup_lines(asked, variants, dispatch, fmt, jobs, as_json) -> dict | None:
    """The GPU-type options checked against the clusters, the cluster's types and the dispatch
    overheads said in a line each; returns the overheads (``_dispatch``)."""
    try:
        asked.check_used(any(v.setup.groups for v in variants))
    except ValueError as e:
        raise SlurmDLError(str(e)) from None
    if len(variants) == 1 and variants[0].setup.groups:
        typer.echo(_wrap(variants[0].cluster), err=as_json)
    overhead = _dispatch(dispatch, fmt, jobs, variants[0].setup)
    if overhead is not None:
        for v in variants:
            v.setup.dispatch = overhead["model"]
        typer.echo(_wrap(overhead["line"]), err=as_json)
    return overhead


def _write_report(report: Path, runs, meta: dict, as_json: bool) -> None:
    from ..sim.reports.report import write_report

    try:
        written = write_report(report, runs, meta)
    except OSError as e:
        raise SlurmDLError(f"--report: cannot write {report}: {e.strerror or e}") from None
    typer.echo(f"wrote {written}", err=as_json)


def _plan(policy, variants, configs, several, make_ranker) -> list:
    """The runs to make: (policy label, policy name, thresholds, variant, group in the table)."""
    planned = []
    for asked in policy:
        if asked == SITE_POLICY:
            if not configs:
                raise SlurmDLError("--policy site: replays each --config's own [policy] mix; give --config")
        else:
            try:
                make_ranker(asked)  # fail fast on a bad name
            except ValueError as e:
                raise SlurmDLError(f"--policy: {e}") from None
        for v in variants:
            name = v.cfg.policy.mix if asked == SITE_POLICY else asked
            sets = v.thr_sets if name in ("las", "deadline-las") and len(v.thr_sets) > 1 else [
                v.thr_sets[0] if v.thr_sets else None]
            for thr in sets:
                label = name if len(sets) == 1 else f"{name}[{','.join(f'{x:g}' for x in thr)}]"
                if asked == SITE_POLICY:
                    label = f"site: {label}"
                planned.append((label, name, thr, v, SITE_GROUP if asked == SITE_POLICY else label))
    if several:  # side by side: each policy's rows together, in the configs' order
        order = list(dict.fromkeys(p[4] for p in planned))
        planned.sort(key=lambda p: (order.index(p[4]), variants.index(p[3])))
    return planned


def _replay(planned, jobs, variants, trace, *, prior, deadline_boost, slurm_backfill, progress, as_json,
            workers=None, keep_results=True, via_slurm=None, recorded=None):
    """Run the planned policies' replays (each policy's cluster runs and fairness runs are
    independent tasks: here, or in ``workers`` local processes) and print each policy's row
    once it and every policy before it have finished, so the output is the same whatever ran
    them; (runs, interrupted, failed replays). ``via_slurm``: (partition, time limit in minutes)
    to run them as one Slurm job array instead. ``keep_results``: keep each run's per-job results (plots, the
    report); otherwise only its summary, so memory stays flat as policies finish."""
    from ..sim.reports.report import ReportRun
    from ..sim.runner import RankerRecipe, ReplayFailed, Task, run_tasks, workers_for
    from ..sim.engine.loop import ClusterResult
    from ..sim.simulate import clusters_for, merge, replays, run_replay

    several = len(variants) > 1
    factories = [RankerRecipe(name, thr, v.starvation, prior, deadline_boost, v.setup.shares, v.cfg, slurm_backfill)
                 for _label, name, thr, v, _group in planned]
    per_run = [replays(jobs, p[3].setup) for p in planned]
    tasks = [Task(k, t) for k, ts in enumerate(per_run) for t in ts]
    # each policy's replays largest first, policies in their order: rows come in early and the
    # small fairness runs fill the last gaps
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i][0], -tasks[i][1].jobs))
    outputs: list[dict] = [{} for _ in planned]
    runs: list[ReportRun] = []
    failed_runs: set[int] = set()
    cursor = [0]  # the next planned run to print

    def execute(task, on_finish):
        k, t = task
        v = planned[k][3]  # no per-job results wanted: only the summary comes back
        return run_replay(jobs, factories[k], v.setup, t, on_finish=on_finish,
                          summary_only=not keep_results and v.idle is None)

    def unpack(i, output):
        k, t = tasks[i]
        if t.kind != "cluster" or not isinstance(output, tuple):
            return output
        return ClusterResult.unpacked(output, clusters_for(jobs, planned[k][3].setup)[t.part][1])

    def on_done(i, output):
        k, t = tasks[i]
        outputs[k][t] = output
        _advance()

    def _advance():
        while cursor[0] < len(planned) and (cursor[0] in failed_runs
                                            or len(outputs[cursor[0]]) == len(per_run[cursor[0]])):
            if cursor[0] not in failed_runs:
                _finish_run(cursor[0])
            cursor[0] += 1

    def _finish_run(k):
        label, _name, _thr, v, group = planned[k]
        summary, results = merge(v.setup, [outputs[k][t] for t in per_run[k]])
        outputs[k] = {t: None for t in per_run[k]}  # the merged run holds them now
        if v.idle is not None:
            from ..sim.idle_replay import what_if
            summary["idle"] = {**v.idle["label"], **what_if(jobs, v.idle["outcomes"], v.idle["config"], factories[k],
                                                             v.setup, results)}
        progress.clear()
        runs.append(ReportRun(label, v.label if several else None, summary, results if keep_results else [], k))
        if not as_json:
            if len(runs) == 1:
                out.table_head(trace, len(jobs), [(x.label, x.cluster, x.cost.describe()) for x in variants])
                if recorded is not None:  # what the history itself says, beside the replays
                    out.table_row("recorded", {**recorded, "utilization": None, "preemptions_per_job": None})
            if several and (len(runs) == 1 or planned[runs[-2].planned][4] != group):
                out.group_line(group if group != SITE_GROUP else "site: " + ", ".join(
                    f"{x.label} = {x.cfg.policy.mix}" for x in variants))
            out.table_row(v.label if several else label, summary, indent=several)
            out.type_line(summary, indent=several)

    interrupted = False
    failed = []
    progress.begin_tasks(len(tasks), sum(t.jobs for t in tasks))
    try:
        if via_slurm is not None:
            only = [not keep_results and p[3].idle is None for p in planned]
            failed = _via_slurm(tasks, jobs, factories, planned, via_slurm, only,
                                on_done=lambda i, o: on_done(i, unpack(i, o)),
                                tick=progress.tick, name_of=lambda i: _task_name(planned[tasks[i].run], tasks[i].replay,
                                                                                 several),
                                as_json=as_json, progress=progress)
            failed_runs.update(tasks[f.index].run for f in failed)
            _advance()
        else:
            run_tasks(tasks, execute, on_done, workers=workers_for(workers, tasks, lambda t: t.jobs),
                      order=order, tick=progress.tick, pack=_pack, unpack=unpack)
    except ReplayFailed as e:
        progress.clear()
        v = planned[tasks[e.index][0]][3]
        raise SlurmDLError(f"{v.label}: {e.error}" if several else str(e.error)) from None
    except KeyboardInterrupt:
        progress.clear()
        interrupted = True
        typer.echo(f"interrupted: {len(runs)} of {len(planned)} runs finished; writing those", err=True)
    progress.clear()
    return runs, interrupted, failed


def _task_name(plan, replay, several: bool) -> str:
    """A replay in words: ``las: the shared cluster``, ``las: account vc1 alone``."""
    label = plan[0] if not several else f"{plan[0]} @ {plan[3].label}"
    if replay.kind == "cluster":
        return f"{label}: the {replay.name} cluster" if replay.name == "shared" else f"{label}: cluster {replay.name}"
    return f"{label}: account {replay.name} alone"


def _via_slurm(tasks, jobs, recipes, planned, via, summary_only, *, on_done, tick, name_of, as_json, progress) -> list:
    """The replays as one Slurm job array; the failed ones (each said, with its log)."""
    from ..slurm.sim_array import WorkFolder, run_array

    partition, minutes = via
    work = WorkFolder.create(Path.cwd())  # fresh, unguessable, 0700; refused where others could swap it
    folder = work.path

    def say(line: str) -> None:  # a path stays whole on a line of its own
        progress.clear()
        text, _, path = line.partition("\0")
        typer.echo(_wrap(text) + (f"\n  {path}" if path else ""), err=True)

    inputs = {"jobs": jobs, "recipes": recipes, "setups": [p[3].setup for p in planned], "summary_only": summary_only}
    failed = run_array(tasks, inputs, on_done,
                       work=work, partition=partition, time_min=minutes, name_of=name_of, tick=tick, say=say)
    progress.clear()
    for f in failed:
        say(f"replay {name_of(f.index)} (Slurm job {f.job_id}) failed: {f.why}; its log:\0{f.log}")
    if failed:
        say(f"the other replays' results are shown; the work folder stays:\0{folder}")
    return failed


def _pack(output):
    """A replay's output as it crosses from a worker process (see ``ClusterResult.packed``)."""
    return output.packed() if hasattr(output, "packed") else output


def _doc(variants, runs, several, *, imported, overhead, slurm_backfill, interrupted, not_run) -> dict:
    """The JSON document of the runs."""
    if several:
        doc = {"configs": {v.label: {"path": str(v.path), "cluster": v.cluster, "preemption_cost": v.cost.describe(),
                                     "policies": {r.policy: r.summary for r in runs if r.config == v.label}}
                           for v in variants}}
    else:
        doc = {"policies": {r.policy: r.summary for r in runs}}
    if imported is not None:
        doc["import"] = imported
    if overhead is not None:
        doc["dispatch"] = overhead["doc"]
    if slurm_backfill:
        doc["placement"] = "slurm-backfill"
    if interrupted:
        doc["interrupted"] = True
        doc["policies_not_run"] = not_run
    return doc


def _dispatch(text, fmt, jobs, setup) -> dict | None:
    """--dispatch: the overheads to replay with, how they were found (a line, a JSON part)."""
    from ..sim.engine.overhead import estimate_dispatch
    from ..sim.engine.state import Dispatch
    from ..sim.workloads.traces import HISTORY_FORMATS

    if text is None:
        return None
    head, _, tail = str(text).strip().lower().partition(":")
    allowed = "allowed: auto[:PASS], RELEASE[:PASS] (0-3600 s)"
    try:
        pass_s = float(tail) if tail else 0.0
        if head == "auto":
            if fmt not in HISTORY_FORMATS:
                raise SlurmDLError("--dispatch auto: needs a history (--format sacct-json, sacct or helios)")
            if setup.nodes is None and not setup.groups:
                raise SlurmDLError("--dispatch auto: needs --cluster-from-slurm, --config, --nodes or --node-types")
            per_type: dict[str, int] = {}
            for g in setup.groups or ():  # several GPU types: each type's jobs wait on its GPUs
                per_type[g.gpu_type] = per_type.get(g.gpu_type, 0) + g.gpus
            total = sum(per_type.values()) if per_type else setup.nodes * setup.gpus_per_node
            est = estimate_dispatch(jobs, total, pass_s, per_type)
            model, line = est.dispatch, est.describe()
            doc = {"source": "history", "release_s": model.release_s, "pass_s": model.pass_s,
                   "starts_measured": est.gaps, "median_gap_s": est.median_gap_s, "p90_gap_s": est.p90_gap_s}
        else:
            model = Dispatch(float(head), pass_s)
            line = f"dispatch overhead: {model.describe()}"
            doc = {"source": "given", "release_s": model.release_s, "pass_s": model.pass_s}
    except ValueError:
        raise SlurmDLError(f"--dispatch: got {text!r}; {allowed}") from None
    return {"model": model, "line": line, "doc": doc}


def _wrap(text: str) -> str:
    """A long information line folded to 80 columns (continuations indented)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, 80, subsequent_indent="  ", break_on_hyphens=False))


@dataclass
class _Variant:
    """One site config's replay settings (or the flags' alone when no --config is given)."""

    path: Path | None
    label: str | None
    cfg: object
    setup: object
    cost: object
    thr_sets: list
    starvation: float | None
    cluster: str
    idle: dict | None


def _config_labels(paths: list[Path]) -> list[str]:
    """Each config's file name; with the parent folder where two share a name."""
    names = [p.name for p in paths]
    labels = [str(Path(p.parent.name) / p.name) if names.count(p.name) > 1 else p.name for p in paths]
    if len(set(labels)) < len(labels):
        raise SlurmDLError("--config: the same file is given twice; give two different site configs")
    return labels


def preemption_cost(preempt_cost: str | None, checkpoint_interval: float | None, cfg):
    """--preempt-cost when given; otherwise the site config's [preemption]
    restart_delay_seconds; otherwise free (0 s). Work since the last checkpoint is lost only
    with --checkpoint-interval: the prioritizer signals a job to checkpoint before requeueing
    it, so by default a preempted job loses no work."""
    from ..sim.engine.state import PreemptionCost

    try:
        if preempt_cost is not None:
            return PreemptionCost.parse(preempt_cost, checkpoint_interval)
        restart = float(cfg.preemption.restart_delay_seconds) if cfg is not None else 0.0
        return PreemptionCost(restart, checkpoint_interval)
    except ValueError as e:
        raise SlurmDLError(str(e)) from None


def _variant(path, label, jobs, *, nodes, gpus_per_node, cluster_per_vc, preempt_cost, checkpoint_interval,
             las_thresholds, starvation, spread, model_info, no_fairness, idle, idle_action, utilisation,
             synthetic_idle, cluster_line, asked=None, live=None, recorded=False, cfg=None) -> _Variant:
    from .config_file import load_config
    from ..sim.simulate import SimSetup
    from ..sim.workloads.traces import read_cluster_sizes

    if cfg is None and path:
        cfg = load_config(path)
    per = gpus_per_node if gpus_per_node is not None else (cfg.max_gpus_per_node if cfg else 8)
    n = nodes
    if n is None and cfg and not cluster_per_vc:
        n = cfg.total_gpus // per
    thr_sets = [_thresholds(t) for t in las_thresholds]
    if not thr_sets and cfg:
        thr_sets = [list(cfg.policy.las.thresholds_gpu_s)]
    starv = starvation if starvation is not None else (cfg.policy.las.starvation_factor if cfg else None)
    cost = preemption_cost(preempt_cost, checkpoint_interval, cfg)
    minfo = json.loads(Path(model_info).read_text()) if model_info else None
    sizes = read_cluster_sizes(cluster_per_vc) if cluster_per_vc else None
    setup = SimSetup(gpus_per_node=per, cluster_sizes=sizes, nodes=n, cost=cost, spread=spread, model_info=minfo,
                     fairness=not no_fairness, shares=dict(cfg.policy.fairshare.shares) if cfg else None)
    typed = _typed(asked, cfg, gpus_per_node, live, recorded, sizes, spread,
                   cfg_groups=nodes is None and not cluster_per_vc)  # --nodes N: the size given
    if typed is not None:
        setup.groups, setup.types = typed.groups, typed.types
        cluster = typed.line
    elif sizes is not None:
        cluster = f"each group its own cluster ({cluster_per_vc.name}), {per} GPUs per node"
    elif n:
        cluster = f"{n} node{'s' if n != 1 else ''} x {per} GPUs ({n * per} GPUs)" + (
            " from Slurm" if cluster_line else "")
    else:
        cluster = "no cluster size given"
    idle_setup = _idle_setup(jobs, cfg, idle_action, utilisation, synthetic_idle) if idle else None
    return _Variant(path, label, cfg, setup, cost, thr_sets, starv, cluster, idle_setup)


def _typed(asked, cfg, gpus_per_node, live, recorded, sizes, spread, cfg_groups=True):
    """The variant's node groups of several GPU types, or None (one type: the plain replay)."""
    if asked is None:
        return None
    try:
        typed = asked.cluster(cfg, gpus_per_node, live, recorded, cfg_groups)
    except ValueError as e:
        raise SlurmDLError(str(e)) from None
    if typed is not None and sizes is not None:
        raise SlurmDLError("--cluster-per-vc: not with node groups of several GPU types")
    if typed is not None and spread:
        raise SlurmDLError("--spread: not with several GPU types or node sizes (a job's GPUs are all of one group)")
    return typed


def _report_meta(trace, fmt, jobs, imported, variants, runs, no_fairness, interrupted, not_run) -> dict:
    from datetime import datetime, timezone

    def when(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if t > 1e8 else f"{t:g} s"

    subs = [j.submit_time for j in jobs]
    facts = [("trace", trace.name), ("format", fmt), ("jobs replayed", str(len(jobs))),
             ("first / last submission", f"{when(min(subs))} / {when(max(subs))}"),
             ("GPUs per job", f"{min(j.num_gpus for j in jobs)} to {max(j.num_gpus for j in jobs)}"),
             ("accounts", str(len({j.account for j in jobs})))]
    if imported is not None:
        facts.append(("import", imported["describe"]))
    missing = []
    if no_fairness:
        missing.append("Finish-time fairness (ρ, Jain): not computed (--no-fairness).")
    elif any(v.setup.cluster_sizes is not None for v in variants):
        missing.append("Finish-time fairness: each group runs on its own cluster, so ρ is 1 by definition.")
    if not any("deadline_hit_rate" in r.summary for r in runs):
        missing.append("Deadline outcomes: no job in the trace has a strict deadline.")
    if not any(r.summary.get("idle") for r in runs):
        missing.append("Idle-GPU policy: not replayed (--idle-policy with GPU utilisation).")
    if interrupted:
        missing.append(f"Interrupted: not run: {', '.join(not_run)}.")
    return {"title": f"What-if: {trace.name}", "trace": facts, "not_computed": missing,
            "interrupted": interrupted, "not_run": not_run,
            "configs": [{"label": v.label or "(none: flags only)", "cluster": v.cluster, "cost": v.cost.describe()}
                        for v in variants]}


def _live_cluster(gpus_per_node: int | None) -> tuple[int, int, str, list]:
    """(nodes, GPUs per node, a line describing it, node groups by type and size) from the live
    cluster's GPU nodes."""
    from collections import Counter

    from ..core.errors import SlurmError
    from ..sim.engine.fleet import groups_from_nodes, several_types
    from ..slurm import get_backend

    try:
        backend = get_backend()
        nodes = [n for n in backend.nodes() if n.gpus > 0]
        parts = [p.name for p in backend.partitions()]
    except SlurmError as e:
        raise SlurmDLError(f"--cluster-from-slurm: cannot read the cluster: {e}") from None
    if not nodes:
        raise SlurmDLError("--cluster-from-slurm: the cluster has no GPU nodes")
    per = gpus_per_node or Counter(n.gpus for n in nodes).most_common(1)[0][0]
    types = sorted({n.gpu_type for n in nodes if n.gpu_type})
    total = sum(n.gpus for n in nodes)
    shape = (f"cluster from Slurm: {len(nodes)} GPU nodes, {total} GPUs"
             f"{' (' + ', '.join(types) + ')' if types else ''}; partitions: {', '.join(parts) or '-'}")
    groups = groups_from_nodes(nodes)
    if any(n.gpus != per for n in nodes) and not several_types(groups):
        shape += f"; simulated as {len(nodes)} x {per} GPUs (nodes differ)"
    return len(nodes), per, shape, groups


def _idle_setup(jobs, cfg, idle_action, utilisation, synthetic_idle) -> dict:
    """The idle policy's config and per-job outcomes (computed once: they do not depend on the
    scheduling policy), and how the utilisation was obtained."""
    from ..core.config import TelemetryConfig
    from ..sim.idle_replay import judge_all
    from ..sim.workloads.traces import attach_utilisation, read_utilisation
    from ..sim.workloads.utilisation import parse_synthetic, profiles_of, synthetic_profiles

    tcfg = cfg.telemetry if cfg else TelemetryConfig()
    if idle_action is not None:
        if idle_action not in ("report", "warn", "deprioritize", "cancel"):
            raise SlurmDLError(f"--idle-action: got {idle_action!r}; allowed: report, warn, deprioritize, cancel")
        tcfg = tcfg.model_copy(update={"idle_action": idle_action})
    sources = []
    if utilisation:
        by_id = read_utilisation(utilisation)
        matched = attach_utilisation(jobs, by_id)
        sources.append(f"{utilisation}: {matched} of {len(by_id)} rows matched a job")
    profiles = profiles_of(jobs)
    given = sum(1 for p in profiles if p is not None)
    if given and not utilisation:
        sources.append(f"trace column gpu_util: {given} jobs")
    synthetic = synthetic_idle is not None
    if synthetic:
        try:
            frac, seed = parse_synthetic(synthetic_idle)
        except ValueError as e:
            raise SlurmDLError(str(e)) from None
        fake = synthetic_profiles(jobs, frac, seed)
        made = sum(1 for p, f in zip(profiles, fake) if p is None and f is not None)
        profiles = [p if p is not None else f for p, f in zip(profiles, fake)]
        sources.append(f"SYNTHETIC: {made} jobs ({frac:.0%} of those without utilisation, seed {seed}) "
                       f"run at 90% then sit idle after a random share of their run")
    if not any(p is not None for p in profiles):
        raise TraceError("--idle-policy: no job has GPU utilisation; give a gpu_util column, "
                         "--utilisation FILE or --synthetic-idle FRACTION[:SEED]")
    return {"config": tcfg, "outcomes": judge_all(jobs, profiles, tcfg),
            "label": {"synthetic": synthetic, "source": "; ".join(sources)}}


def _write_idle_report(path: Path, jobs, outcomes) -> None:
    import csv

    from ..sim.idle_replay import OUTCOME_COLUMNS, outcome_rows

    try:
        with Path(path).open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(OUTCOME_COLUMNS)
            w.writerows(outcome_rows(jobs, outcomes))
    except OSError as e:
        raise SlurmDLError(f"--idle-report: cannot write {path}: {e.strerror or e}") from None


