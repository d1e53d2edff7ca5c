"""``slurm-dl simulate``: replay a trace through one or more policies and compare them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import List, Optional

import typer

from ..core.errors import SlurmDLError, TraceError
from .common import expected_errors

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
  fairshare        fair share between accounts (shares from --config)
  deadline         deadline boost (--deadline-boost); deadline-las: then LAS
  qssf, class, combined (tiers from --config)

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
  F=$F,End,Elapsed,Timelimit,AllocTRES,ReqTRES
  TZ=UTC sacct -a -P --duplicates -S 2024-01-01 -E now -o $F > history.txt

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


def _thresholds(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise SlurmDLError(f"--las-thresholds: got {text!r}; allowed: increasing GPU-seconds like 3250,7200,18000")
    if not vals or any(v <= 0 or not math.isfinite(v) for v in vals) or any(b <= a for a, b in zip(vals, vals[1:])):
        raise SlurmDLError(f"--las-thresholds: got {text!r}; allowed: positive, strictly increasing GPU-seconds")
    return vals


def _default_prior(trace: Path) -> Path | None:
    for cand in (trace.parent.parent / "tiresias" / "yarn-gput1000.csv",
                 Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "tiresias" / "yarn-gput1000.csv"):
        if cand.is_file():
            return cand
    return None


def simulate(
    trace: Path = typer.Option(..., "--trace", help="trace file"),
    fmt: str = typer.Option("philly", "--format", help="philly | chronus | tiresias | csv | sacct-json | sacct | helios"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="skip and count records that cannot be read"),
    keep_cpu: bool = typer.Option(False, "--keep-cpu-jobs", help="sacct/helios: replay CPU-only jobs (0 GPUs)"),
    group_by: str = typer.Option("account", "--group-by", help="sacct/helios: account | partition as the groups"),
    policy: List[str] = typer.Option(["fifo"], "--policy", help="policy name; repeat to compare side by side"),
    cluster_per_vc: Optional[Path] = typer.Option(None, "--cluster-per-vc", help="CSV vc,nodes: each VC its own cluster"),
    nodes: Optional[int] = typer.Option(None, "--nodes", min=1, help="one shared cluster of this many nodes"),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", min=1, help="GPUs per node (default 8 or the site config)"),
    config: Optional[Path] = typer.Option(None, "--config", help="site config TOML: cluster shape, LAS thresholds, preemption"),
    start: Optional[str] = typer.Option(None, "--start", help="keep jobs submitted at or after (YYYY-MM-DD[ HH:MM:SS] or seconds)"),
    end: Optional[str] = typer.Option(None, "--end", help="keep jobs submitted before this time"),
    preempt_cost: str = typer.Option("0", "--preempt-cost", help="restart cost in seconds, or 'helios' (7 s 1 GPU, 30 s 2-8, 60 s above)"),
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
) -> None:
    with expected_errors():
        _run(**locals())


def _run(trace, fmt, skip_bad, keep_cpu, group_by, policy, cluster_per_vc, nodes, gpus_per_node, config, start, end, preempt_cost,
         checkpoint_interval, las_thresholds, starvation, gittins_prior, deadline_boost, spread, model_info,
         no_fairness, idle_policy, idle_action, utilisation, synthetic_idle, idle_report, as_json, plot,
         quiet=False, from_slurm=False) -> None:
    from ..core.config import load_config
    from ..sim.ranking import load_prior, make_ranker
    from ..sim.simulate import SimSetup, simulate as run_sim
    from ..sim.state import PreemptionCost
    from ..sim.traces import HISTORY_FORMATS, parse_time, read_cluster_sizes, read_history, read_trace

    cfg = load_config(config) if config else None
    try:
        t0 = parse_time(start) if start else None
        t1 = parse_time(end) if end else None
        cost = PreemptionCost.parse(preempt_cost, checkpoint_interval)
    except ValueError as e:
        raise SlurmDLError(str(e)) from None
    if from_slurm:
        if nodes is not None or cluster_per_vc:
            raise SlurmDLError("--cluster-from-slurm: give it instead of --nodes / --cluster-per-vc")
        nodes, gpus_per_node, shape = _live_cluster(gpus_per_node)
        typer.echo(shape, err=as_json)
    if gpus_per_node is None:
        gpus_per_node = cfg.max_gpus_per_node if cfg else 8
    if nodes is None and cfg and not cluster_per_vc:
        nodes = cfg.total_gpus // gpus_per_node
    thr_sets = [_thresholds(t) for t in las_thresholds]
    if not thr_sets and cfg:
        thr_sets = [list(cfg.policy.las.thresholds_gpu_s)]
    if starvation is None and cfg:
        starvation = cfg.policy.las.starvation_factor
    imported = None
    if fmt in HISTORY_FORMATS:
        jobs, stats = read_history(trace, fmt, keep_cpu=keep_cpu, skip_bad=skip_bad, group=group_by)
        jobs = [j for j in jobs if (t0 is None or j.submit_time >= t0) and (t1 is None or j.submit_time < t1)]
        imported = {"format": fmt, **{k: v for k, v in vars(stats).items()}}
        typer.echo(f"{trace.name}: {stats.describe()}", err=as_json)
        for ex in stats.bad_examples:
            typer.echo(f"  skipped {ex}", err=as_json)
    else:
        jobs = read_trace(trace, fmt, t0, t1)
    if not jobs:
        raise TraceError(f"{trace}: no jobs submitted in the window [{start}, {end})")
    idle = _idle_setup(jobs, cfg, idle_action, utilisation, synthetic_idle) if (
        idle_policy or idle_action or utilisation or synthetic_idle or idle_report) else None
    if idle is not None and idle_report:
        _write_idle_report(idle_report, jobs, idle["outcomes"])
        typer.echo(f"wrote {idle_report}", err=as_json)
    prior_path = gittins_prior or _default_prior(trace)
    prior = load_prior(prior_path) if prior_path and "gittins" in policy else []
    minfo = json.loads(Path(model_info).read_text()) if model_info else None
    setup = SimSetup(
        gpus_per_node=gpus_per_node, cluster_sizes=read_cluster_sizes(cluster_per_vc) if cluster_per_vc else None,
        nodes=nodes, cost=cost, spread=spread, model_info=minfo, fairness=not no_fairness,
        shares=dict(cfg.policy.fairshare.shares) if cfg else None,
    )
    from ..sim.progress import Progress
    from ..sim.simulate import runs_per_job

    planned = []
    for name in policy:
        try:
            make_ranker(name)  # fail fast on a bad name
        except ValueError as e:
            raise SlurmDLError(f"--policy: {e}") from None
        sets = thr_sets if name in ("las", "deadline-las") and len(thr_sets) > 1 else [thr_sets[0] if thr_sets else None]
        for thr in sets:
            label = name if len(sets) == 1 else f"{name}[{','.join(f'{x:g}' for x in thr)}]"
            planned.append((label, name, thr))
    progress = Progress(enabled=not (quiet or as_json))
    first = min(j.submit_time for j in jobs)
    last = max(j.submit_time for j in jobs)
    runs: list[tuple[str, dict, list]] = []
    interrupted = False
    try:
        for label, name, thr in planned:
            def factory(name=name, thr=thr):
                return make_ranker(name, las_thresholds=thr, starvation=starvation, prior=prior,
                                   boost_s=deadline_boost, shares=setup.shares, config=cfg)

            progress.begin(label, len(jobs) * runs_per_job(setup), first, last)
            try:
                summary, results = run_sim(jobs, factory, setup, progress)
            except ValueError as e:
                raise SlurmDLError(str(e)) from None
            if idle is not None:
                from ..sim.idle_replay import what_if
                summary["idle"] = {**idle["label"], **what_if(jobs, idle["outcomes"], idle["config"], factory, setup,
                                                                results)}
            progress.clear()
            runs.append((label, summary, results))
            if not as_json:
                if len(runs) == 1:
                    _table_head(trace, len(jobs), cost.describe())
                _table_row(label, summary)
    except KeyboardInterrupt:
        progress.clear()
        interrupted = True
        typer.echo(f"interrupted: {len(runs)} of {len(planned)} policies finished; writing those", err=True)
    if plot and runs:
        from ..sim.plots import write_plots
        for written in write_plots(plot, [(n, r) for n, _, r in runs]) or []:
            typer.echo(f"wrote {written}", err=as_json)
    doc = {"policies": {n: s for n, s, _ in runs}}
    if imported is not None:
        doc["import"] = imported
    if interrupted:
        doc["interrupted"] = True
        doc["policies_not_run"] = [label for label, _, _ in planned[len(runs):]]
    if as_json:
        typer.echo(json.dumps(finite(doc), sort_keys=False, allow_nan=False))
    elif runs:
        _table_foot(doc)
    if interrupted:
        raise typer.Exit(130)


def _live_cluster(gpus_per_node: int | None) -> tuple[int, int, str]:
    """(nodes, GPUs per node, a line describing it) from the live cluster's GPU nodes."""
    from collections import Counter

    from ..core.errors import SlurmError
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
    if any(n.gpus != per for n in nodes):
        shape += f"; simulated as {len(nodes)} x {per} GPUs (nodes differ)"
    return len(nodes), per, shape


def _idle_setup(jobs, cfg, idle_action, utilisation, synthetic_idle) -> dict:
    """The idle policy's config and per-job outcomes (computed once: they do not depend on the
    scheduling policy), and how the utilisation was obtained."""
    from ..core.config import TelemetryConfig
    from ..sim.idle_replay import judge_all
    from ..sim.traces import attach_utilisation, read_utilisation
    from ..sim.utilisation import parse_synthetic, profiles_of, synthetic_profiles

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


def _idle_lines(doc: dict) -> list[str]:
    out = []
    for name, s in doc["policies"].items():
        b = s.get("idle")
        if not b:
            continue
        p = b["policy"]
        head = "SYNTHETIC utilisation — " if b["synthetic"] else ""
        line = (f"{head}{name}: idle policy ({p['idle_action']}{', dry run' if p['dry_run'] else ''}: "
                f"<= {p['idle_util_percent']:g}% for {p['idle_minutes']:g} min + {p['warn_grace_minutes']:g} min grace): "
                f"{b['jobs_with_utilisation']} jobs with utilisation, {b['idle_gpu_hours']:.1f} idle GPU-h, "
                f"reclaimed {b['reclaimed_gpu_hours']:.1f} GPU-h ({b['reclaimed_share_of_idle']:.0%}); "
                f"flagged {b['jobs_flagged']}, warned {b['jobs_warned']}, deprioritized {b['jobs_deprioritized']}, "
                f"cancelled {b['jobs_cancelled']}")
        o = b["other_jobs"]
        if o.get("jobs"):
            line += (f"; other {o['jobs']} jobs: avg JCT {o['avg_jct_s_before'] / 3600:.2f} -> "
                     f"{o['avg_jct_s_after'] / 3600:.2f} h{_pct(o['avg_jct_change'])}, avg queue "
                     f"{o['avg_queue_s_before'] / 3600:.2f} -> {o['avg_queue_s_after'] / 3600:.2f} h"
                     f"{_pct(o['avg_queue_change'])}")
        out.append(line)
    if any(s.get("idle", {}).get("synthetic") for s in doc["policies"].values()):
        out.append("(SYNTHETIC: the utilisation above was generated by --synthetic-idle, not measured)")
    return out


def _pct(change) -> str:
    return "" if change is None else f" ({change:+.1%})"


def finite(obj):
    """The same document with every NaN or infinite float as None (JSON has neither)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


_COLS = ("JCT h", "med h", "p99 h", "wait h", "span d", "util", "pre/j", "Jain", "max ρ")


def _table_head(trace: Path, n: int, cost: str) -> None:
    typer.echo(f"{trace.name}: {n} jobs, preemption cost {cost}")
    typer.echo(f"{'policy':<16}" + "".join(f"{c:>7}" for c in _COLS))


def _fmt(v, spec: str, scale: float = 1.0) -> str:
    return "–" if v is None else format(v / scale, spec)


def _table_row(name: str, s: dict) -> None:
    cells = (_fmt(s["avg_jct_s"], ".2f", 3600), _fmt(s["median_jct_s"], ".2f", 3600), _fmt(s["p99_jct_s"], ".1f", 3600),
             _fmt(s["avg_queue_s"], ".2f", 3600), _fmt(s["makespan_s"], ".1f", 86400), _fmt(s["utilization"], ".1%"),
             _fmt(s["preemptions_per_job"], ".2f"), _fmt(s.get("jain_rho"), ".3f"), _fmt(s.get("max_rho"), ".2f"))
    label = name if len(name) <= 15 else name[:14] + "…"
    typer.echo(f"{label:<16}" + "".join(f"{c:>7}" for c in cells))


def _table_foot(doc: dict) -> None:
    typer.echo("JCT: job completion time (submit to end), mean, median and p99; wait: mean")
    typer.echo("queueing time; span: makespan; pre/j: preemptions per job")
    typer.echo("rho: an account's mean JCT here over alone on its share (1 = fair, max =")
    typer.echo("worst); Jain: Jain's index of the accounts' rho (1 = all equal); –: not")
    typer.echo("computed (--no-fairness)")
    extra = [(k, s) for k, s in doc["policies"].items() if "deadline_hit_rate" in s]
    for k, s in extra:
        line = f"{k}: strict deadline hit rate {s['deadline_hit_rate']:.1%}"
        if "best_effort_avg_jct_s" in s:
            line += f", best-effort avg JCT {s['best_effort_avg_jct_s'] / 3600:.2f} h"
        typer.echo(line)
    for line in _idle_lines(doc):
        typer.echo(line)
