"""``slurm-dl simulate``: its options and help, and the table or JSON it prints; the what-if
itself (replaying a trace through one or more policies) is the simulator's (slurm_dl.sim.whatif)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from . import simulate_out as out
from . import whatif_options as W
from .common import expected_errors
from .simulate_out import finite  # noqa: F401  (tests and callers import it from here)

HELP = """Replay a GPU-cluster trace through scheduling policies, side by side.

The policies are the prioritizer's own code, built from --config as the
prioritizer builds them; without --config, from the default config on the
cluster --nodes gives (what a site that sets nothing else deploys: its LAS,
its preemption guards, its restart delay). The options below override the
config's settings; the output's header names those that did.

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
  site             each --config's own [policy] mix (the deployed policy;
                   without --config the default's, combined)

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
  F=$F,End,Elapsed,Timelimit,AllocTRES,ReqTRES,AdminComment,ConsumedEnergyRaw
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
LAS thresholds, fair-share shares, the guards and restart delay of a
preemption); a config that names only the cluster replays exactly what no
--config does; give
it twice (--config current.toml --config proposed.toml) to see each policy
under both, side by side. --report DIR writes DIR/index.html: the table,
JCT, queueing and utilisation figures, each account's waits; it needs no
network to open.

GPU types: --node-types v100:15,p100:15,k80:15 (TYPE:NODES in node order,
--gpus-per-node each), --fleet FILE (a row per node: gpu, model), a --config
whose node groups have several types, or --cluster-from-slurm. Each job runs
at its speed on the type it got: --throughputs FILE (Gavel's JSON or a CSV
kind,TYPE1,...; a job naming no model gets one drawn with --model-seed; its
duration is its run time on its fastest type). --type-choice blind (Slurm's
first free GPUs), fastest, constrained (each job asks only the types that run
it at least half as fast as its best, as a careful user would; then Slurm's
first free GPUs among them), or aware (the default: each type to the jobs that
gain most from it). Service is charged at the type's speed; the table adds
each type's busy share.

What the aware choice knows of a job's speeds: --speeds learned (the
default, what the prioritizer does) starts from the site's speed per type
(and its own [throughput] matrix) and learns each user's job name from the
runs that finished so far (median run time per type, from min_samples runs
on two types); a job without a name is known by its model. --speeds oracle
reads the speeds the run times come from: an upper bound.

Energy: --power-save none | fixed:SECONDS | predictive counts each node's
draw ([power] watts of --config) and powers idle nodes down: never, after
SECONDS idle (Slurm's SuspendTime), or as the [power] forecast plans. A job
placed on a powered-down node waits for its boot. Each policy then reports
kWh (idle nodes' kWh apart), kWh per GPU-hour, power cycles and boot waits.

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


def simulate(
    trace: Path = W.TraceOpt,
    fmt: str = W.FormatOpt,
    skip_bad: bool = typer.Option(
        False, "--skip-bad", help="skip and count records that cannot be read"
    ),
    keep_cpu: bool = typer.Option(
        False, "--keep-cpu-jobs", help="sacct/helios: replay CPU-only jobs (0 GPUs)"
    ),
    group_by: str = typer.Option(
        "account", "--group-by", help="sacct/helios: account | partition as the groups"
    ),
    policy: List[str] = typer.Option(
        ["fifo"], "--policy", help="policy name; repeat to compare side by side"
    ),
    cluster_per_vc: Optional[Path] = W.ClusterPerVcOpt,
    nodes: Optional[int] = W.NodesOpt,
    gpus_per_node: Optional[int] = W.GpusPerNodeOpt,
    config: List[Path] = typer.Option(
        [],
        "--config",
        help="site config TOML: cluster shape, LAS thresholds, preemption; twice: side by side",
    ),
    start: Optional[str] = W.StartOpt,
    end: Optional[str] = W.EndOpt,
    preempt_cost: Optional[str] = W.preempt_cost_opt("--config's [preemption], else 0"),
    checkpoint_interval: Optional[float] = typer.Option(
        None,
        "--checkpoint-interval",
        min=1,
        help="lose work since the last periodic checkpoint (s)",
    ),
    las_thresholds: List[str] = typer.Option(
        [], "--las-thresholds", help="LAS thresholds in GPU-s, comma-separated; repeat to sweep"
    ),
    starvation: Optional[float] = typer.Option(
        None,
        "--starvation",
        min=0.0,
        help="LAS starvation guard S (promote after S x executed time)",
    ),
    gittins_prior: Optional[Path] = typer.Option(
        None, "--gittins-prior", help="CSV with a 'duration' column of GPU-seconds"
    ),
    deadline_boost: Optional[float] = typer.Option(
        None,
        "--deadline-boost",
        min=1.0,
        help="deadline, deadline-las: boost when slack < this (s); default from --config, else 3600",
    ),
    spread: bool = typer.Option(
        False,
        "--spread",
        help="let jobs spread over extra nodes when they do not fit consolidated (slower, chronus/model_info.json)",
    ),
    model_info: Optional[Path] = typer.Option(
        None, "--model-info", help="placement-sensitivity table (chronus/model_info.json)"
    ),
    no_fairness: bool = W.NoFairnessOpt,
    idle_policy: bool = typer.Option(
        False,
        "--idle-policy",
        help="what the [telemetry] idle policy would reclaim (needs utilisation)",
    ),
    idle_action: Optional[str] = typer.Option(
        None,
        "--idle-action",
        help="override [telemetry] idle_action: report | warn | deprioritize | cancel",
    ),
    utilisation: Optional[Path] = typer.Option(
        None,
        "--utilisation",
        help="CSV job_id,gpu_util: per-job GPU utilisation (implies --idle-policy)",
    ),
    synthetic_idle: Optional[str] = typer.Option(
        None,
        "--synthetic-idle",
        help="SYNTHETIC utilisation FRACTION[:SEED] for jobs without any (implies --idle-policy)",
    ),
    idle_report: Optional[Path] = typer.Option(
        None, "--idle-report", help="write the idle policy's per-job verdicts (CSV) to FILE"
    ),
    as_json: bool = W.JsonOpt,
    plot: Optional[Path] = typer.Option(
        None, "--plot", help="write JCT CDF and queue-length plots into DIR"
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar on stderr"),
    from_slurm: bool = typer.Option(
        False, "--cluster-from-slurm", help="nodes and GPUs per node of the live cluster (sinfo)"
    ),
    report: Optional[Path] = W.ReportOpt,
    dispatch: Optional[str] = typer.Option(
        None,
        "--dispatch",
        help="scheduler overheads: auto[:PASS] (from the history) or RELEASE[:PASS] seconds",
    ),
    slurm_backfill: bool = typer.Option(
        False,
        "--slurm-backfill",
        help="no preemption: Slurm's backfill starts jobs in each policy's order",
    ),
    opt_in: str = typer.Option(
        "recorded",
        "--opt-in",
        help="jobs that may be preempted: recorded (sacct: the filter's tag; other traces: all) | all | none",
    ),
    node_types: Optional[str] = typer.Option(
        None,
        "--node-types",
        help="node groups of GPU types in node order, TYPE:NODES,... e.g. v100:15,p100:15,k80:15 (--gpus-per-node each, default 8)",
    ),
    fleet: Optional[Path] = typer.Option(
        None,
        "--fleet",
        help="fleet CSV, one row per node with gpu and model (openb_node_list_gpu_node.csv)",
    ),
    throughputs: Optional[Path] = typer.Option(
        None,
        "--throughputs",
        help="speed of each model on each GPU type: Gavel's simulation_throughputs.json or a CSV kind,TYPE1,TYPE2,...",
    ),
    model_seed: Optional[int] = typer.Option(
        None,
        "--model-seed",
        help="seed of the model drawn from --throughputs for each job that names none (default 0)",
    ),
    type_choice: Optional[str] = typer.Option(
        None,
        "--type-choice",
        help="on several GPU types: blind (first free, node order: Slurm's --gpus=N) | fastest (the job's fastest free type) | constrained (each job limited to the types at least half its best speed, then first free) | aware (default)",
    ),
    speeds: Optional[str] = typer.Option(
        None,
        "--speeds",
        help="what the aware choice knows of each job's speeds: learned (default: from the runs finished so far, as the prioritizer learns them) | oracle (the speeds the run times come from: an upper bound)",
    ),
    workers: Optional[int] = W.jobs_opt("; the output is the same"),
    via_slurm: bool = W.ViaSlurmOpt,
    partition: Optional[str] = W.partition_opt(
        "the site config's [simulate] partition, else Slurm's default"
    ),
    time_limit: Optional[str] = W.time_opt("[simulate] time_minutes, 60"),
    power_save: Optional[str] = typer.Option(
        None,
        "--power-save",
        help="node power states and energy: none | fixed:SECONDS (Slurm's SuspendTime) | predictive ([power] forecast)",
    ),
    placement: List[str] = typer.Option(
        [],
        "--placement",
        help="GPU sharing (openb, with --fleet): exclusive | dotprod | bestfit | fgd; repeat to compare; fills the fleet with the trace's tasks",
    ),
    seed: int = typer.Option(
        0,
        "--seed",
        help="--placement: seed of the tasks' order and draws and of the nodes' order for ties",
    ),
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


def _run(**options) -> None:
    """The what-if the options ask for (the simulator's), its table or JSON printed."""
    from ..sim.whatif.run import Options, run
    from .config_file import load_config

    o = Options(**options)
    w = run(o, _Printer(o.as_json), load_config)
    if o.as_json:
        typer.echo(json.dumps(finite(w.doc), sort_keys=False, allow_nan=False))
    elif w.runs:
        out.table_foot(
            {"policies": {r.name: r.summary for r in w.runs}, "recorded": w.recorded}, w.units
        )
    if w.interrupted:
        raise typer.Exit(130)
    if w.failed:
        raise typer.Exit(1)


class _Printer:
    """The what-if's lines: information on stdout (stderr under --json, which keeps stdout for
    the document), alerts on stderr, and the table's rows as the runs finish."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def say(self, text: str) -> None:
        typer.echo(text, err=self.as_json)

    def alert(self, text: str) -> None:
        typer.echo(text, err=True)

    def run_done(self, w, run) -> None:
        from ..sim.whatif.plan import SITE_GROUP

        if self.as_json:
            return
        label, _name, _thr, v, group = w.planned[run.planned]
        several = w.several
        if len(w.runs) == 1:
            out.table_head(
                w.trace,
                len(w.jobs),
                [
                    (x.label, x.cluster, x.cost.describe(), x.config_line, x.overrides)
                    for x in w.variants
                ],
                w.units,
            )
            if w.recorded is not None:  # what the history itself says, beside the replays
                out.table_row(
                    "recorded",
                    {**w.recorded, "utilization": None, "preemptions_per_job": None},
                    w.units,
                )
        if several and (len(w.runs) == 1 or w.planned[w.runs[-2].planned][4] != group):
            out.group_line(
                group
                if group != SITE_GROUP
                else "site: " + ", ".join(f"{x.label} = {x.cfg.policy.mix}" for x in w.variants)
            )
        out.table_row(v.label if several else label, run.summary, w.units, indent=several)
        out.type_line(run.summary, indent=several)
