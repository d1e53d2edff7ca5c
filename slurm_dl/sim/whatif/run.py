"""``simulate``'s what-if from its options: the trace read, a :class:`~.setup.Variant` per site
config, the runs planned (:mod:`.plan`) and replayed here, in local processes or as a Slurm job
array, the plots and the report written; what it says goes through an :class:`Output` (the
command prints it), and :func:`run` returns the runs and their JSON document."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from ...core.errors import SlurmDLError, TraceError
from ..reports.units import TimeUnits, history_span, units_for
from . import results
from .setup import wrap

OPT_IN = ("recorded", "all", "none")


@dataclass
class Options:
    """What ``simulate`` was asked (its options, by the command's parameter names)."""

    trace: Path
    fmt: str = "philly"
    skip_bad: bool = False
    keep_cpu: bool = False
    group_by: str = "account"
    policy: list = field(default_factory=lambda: ["fifo"])
    cluster_per_vc: Path | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    config: list = field(default_factory=list)
    start: str | None = None
    end: str | None = None
    preempt_cost: str | None = None
    checkpoint_interval: float | None = None
    las_thresholds: list = field(default_factory=list)
    starvation: float | None = None
    gittins_prior: Path | None = None
    deadline_boost: float | None = None
    spread: bool = False
    model_info: Path | None = None
    no_fairness: bool = False
    idle_policy: bool = False
    idle_action: str | None = None
    utilisation: Path | None = None
    synthetic_idle: str | None = None
    idle_report: Path | None = None
    as_json: bool = False
    plot: Path | None = None
    quiet: bool = False
    from_slurm: bool = False
    report: Path | None = None
    dispatch: str | None = None
    slurm_backfill: bool = False
    opt_in: str = "recorded"
    node_types: str | None = None
    fleet: Path | None = None
    throughputs: Path | None = None
    model_seed: int | None = None
    type_choice: str | None = None
    speeds: str | None = None
    workers: int | None = None
    via_slurm: bool = False
    partition: str | None = None
    time_limit: str | None = None
    power_save: str | None = None


class Output(Protocol):
    """Where a what-if's lines go."""

    def say(self, text: str) -> None:
        """A line of information (the set-up found, a file written)."""

    def alert(self, text: str) -> None:
        """A line for stderr whatever else is shown (an interruption, a failed array task)."""

    def run_done(self, whatif: "WhatIf", run) -> None:
        """A run has finished, and every run planned before it (``whatif.runs`` ends with it)."""


@dataclass
class WhatIf:
    """A what-if under way, then done: the jobs replayed, the variants, the runs planned, the
    history's own figures (a history only), the units its tables show times in and the runs
    finished so far."""

    trace: Path
    jobs: list
    variants: list
    planned: list
    recorded: dict | None
    units: TimeUnits  # the tables' units, from the history's span
    runs: list = field(default_factory=list)
    doc: dict | None = None
    interrupted: bool = False
    failed: list = field(default_factory=list)

    @property
    def several(self) -> bool:
        return len(self.variants) > 1


def apply_opt_in(jobs, opt_in: str, say: Callable[[str], None]) -> None:
    """``--opt-in``: who the replay may preempt. ``recorded`` keeps what the trace says (a
    sacct history: the filter's tag; public traces: every job); ``all`` asks what preemption
    would do if every job checkpointed; ``none`` replays preemptive policies without victims."""
    if opt_in == "recorded":
        return
    for j in jobs:
        j.checkpointable = opt_in == "all"
        j.requeue = True if opt_in == "all" else None
    say(
        f"--opt-in {opt_in}: {'every' if opt_in == 'all' else 'no'} job taken as opted in to preemption"
    )


def read_jobs(
    trace, fmt, t0, t1, *, keep_cpu, skip_bad, group_by, say
) -> tuple[list, dict | None, str | None]:
    """The trace's jobs in ``[t0, t1)``; for a history also what the import found (a dict and
    a line, said)."""
    from ..workloads.traces import HISTORY_FORMATS, read_history, read_trace

    if fmt not in HISTORY_FORMATS:
        return read_trace(trace, fmt, t0, t1), None, None
    jobs, stats = read_history(trace, fmt, keep_cpu=keep_cpu, skip_bad=skip_bad, group=group_by)
    jobs = [
        j
        for j in jobs
        if (t0 is None or j.submit_time >= t0) and (t1 is None or j.submit_time < t1)
    ]
    described = stats.describe()
    say(wrap(f"{trace.name}: {described}"))
    for ex in stats.bad_examples:
        say(f"  skipped {ex}")
    return jobs, {"format": fmt, **{k: v for k, v in vars(stats).items()}}, described


def run(o: Options, out: Output, load_config: Callable) -> WhatIf:
    """The what-if ``o`` asks for, each site config read with ``load_config``."""
    from ..ranking.ranker import load_prior
    from ..workloads.traces import HISTORY_FORMATS, parse_time
    from . import plan as P
    from . import setup as S
    from .speeds import TypesAsked

    say = out.say
    configs = list(o.config or []) if not isinstance(o.config, Path) else [o.config]
    if o.opt_in not in OPT_IN:  # before a long trace is read, not after
        raise SlurmDLError(f"--opt-in: got {o.opt_in!r}; allowed: {', '.join(OPT_IN)}")
    if o.power_save is not None:  # before a long trace is read, not after
        from ...core.config.power import PowerConfig

        S.power_setting(o.power_save, PowerConfig())
    try:
        t0 = parse_time(o.start) if o.start else None
        t1 = parse_time(o.end) if o.end else None
    except ValueError as e:
        raise SlurmDLError(str(e)) from None
    try:
        asked = TypesAsked.check(
            node_types=o.node_types,
            fleet=o.fleet,
            throughputs=o.throughputs,
            model_seed=o.model_seed,
            type_choice=o.type_choice,
            speeds=o.speeds,
            nodes=o.nodes,
            cluster_per_vc=o.cluster_per_vc,
            from_slurm=o.from_slurm,
        )
    except ValueError as e:
        raise SlurmDLError(str(e)) from None
    nodes, gpus_per_node = o.nodes, o.gpus_per_node
    cluster_line = live = None
    if o.from_slurm:
        if nodes is not None or o.cluster_per_vc:
            raise SlurmDLError(
                "--cluster-from-slurm: give it instead of --nodes / --cluster-per-vc"
            )
        nodes, gpus_per_node, cluster_line, live = S.live_cluster(gpus_per_node)
        say(wrap(cluster_line))
    jobs, imported, described = read_jobs(
        o.trace,
        o.fmt,
        t0,
        t1,
        keep_cpu=o.keep_cpu,
        skip_bad=o.skip_bad,
        group_by=o.group_by,
        say=say,
    )
    if not jobs:
        raise TraceError(f"{o.trace}: no jobs submitted in the window [{o.start}, {o.end})")
    apply_opt_in(jobs, o.opt_in, say)
    drawn = asked.draw(jobs)
    if drawn:
        say(wrap(drawn))
    if o.report:  # find out now, not after a long replay, that the report cannot be written
        try:
            Path(o.report).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SlurmDLError(f"--report: cannot write {o.report}: {e.strerror or e}") from None
    wants_idle = bool(
        o.idle_policy or o.idle_action or o.utilisation or o.synthetic_idle or o.idle_report
    )
    variants = [
        S.variant(
            path,
            label,
            jobs,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            cluster_per_vc=o.cluster_per_vc,
            preempt_cost=o.preempt_cost,
            checkpoint_interval=o.checkpoint_interval,
            las_thresholds=o.las_thresholds,
            starvation=o.starvation,
            spread=o.spread,
            model_info=o.model_info,
            no_fairness=o.no_fairness,
            idle=wants_idle,
            idle_action=o.idle_action,
            utilisation=o.utilisation,
            synthetic_idle=o.synthetic_idle,
            cluster_line=cluster_line,
            asked=asked,
            live=live,
            recorded=o.fmt in HISTORY_FORMATS,
            load=load_config,
            deadline_boost=o.deadline_boost,
            power_save=o.power_save,
        )
        for path, label in (zip(configs, S.config_labels(configs)) if configs else [(None, None)])
    ]
    several = len(variants) > 1
    overhead = S.setup_lines(asked, variants, o.dispatch, o.fmt, jobs, say)
    if o.slurm_backfill:
        say("placement: Slurm's backfill in each policy's order, no preemption")
    if o.idle_report and variants[0].idle is not None:
        results.write_idle_report(o.idle_report, jobs, variants[0].idle["outcomes"])
        say(f"wrote {o.idle_report}")
    prior_path = o.gittins_prior or P.default_prior(o.trace)
    prior = load_prior(prior_path) if prior_path and "gittins" in o.policy else []
    from ..reports.metrics import recorded_figures
    from .progress import Progress

    planned = P.plan(o.policy, variants, configs, several)
    via = P.via_slurm_choice(o.via_slurm, o.partition, o.time_limit, variants[0].cfg)
    recorded = recorded_figures(jobs) if o.fmt in HISTORY_FORMATS else None
    span = max(history_span(jobs), recorded["makespan_s"] if recorded else 0.0)
    w = WhatIf(o.trace, jobs, variants, planned, recorded, units_for(span))

    def on_run(r) -> None:
        w.runs.append(r)
        out.run_done(w, r)

    runs, w.interrupted, w.failed = P.replay(
        planned,
        jobs,
        variants,
        prior=prior,
        deadline_boost=o.deadline_boost,
        slurm_backfill=o.slurm_backfill,
        progress=Progress(enabled=not (o.quiet or o.as_json)),
        alert=out.alert,
        workers=o.workers,
        keep_results=bool(o.plot or o.report),
        via_slurm=via,
        on_run=on_run,
    )
    ran = {r.planned for r in runs}
    not_run = [
        p[0] if not several else f"{p[0]} @ {p[3].label}"
        for k, p in enumerate(planned)
        if k not in ran
    ]
    if o.plot and runs:
        from ..reports.plots import write_plots

        for written in write_plots(o.plot, [(r.name, r.results) for r in runs]) or []:
            say(f"wrote {written}")
    if o.report and runs:
        meta = results.report_meta(
            o.trace,
            o.fmt,
            jobs,
            imported and {**imported, "describe": described},
            variants,
            runs,
            o.no_fairness,
            w.interrupted,
            not_run,
        )
        meta["recorded"] = recorded
        meta["units"] = w.units
        results.write_report(o.report, runs, meta, say)
    doc = results.document(
        variants,
        runs,
        several,
        imported=imported,
        overhead=overhead,
        slurm_backfill=o.slurm_backfill,
        interrupted=w.interrupted,
        not_run=not_run,
    )
    if w.failed:
        doc["policies_not_run"] = not_run
    if recorded is not None:
        doc["recorded"] = recorded
    w.doc = doc
    return w
