"""``slurm-dl tune``: search site-config settings on the site's own history, validated on a
later part of it that the search never saw; writes the proposed config and a report."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import List, Optional

import typer

from ..core.errors import SlurmDLError
from ..sim import tune as T
from . import whatif_options as W
from .common import expected_errors

HELP = f"""Search site-config settings on your own history.

Each --param names a setting by its dotted path in the site config, with its
candidate values separated by ':' (a list value's items by ','). The search
replays the earlier part of the history (--split) with every candidate, picks
the best by --objective under each --constraint, then replays the current
settings, the proposal and every candidate on the later part, which the search
never saw. Each part must hold at least --min-jobs jobs (default {T.MIN_JOBS_PER_PART}). Writes
the proposed config (--output) and an HTML report (--report).

Example:

\b
  slurm-dl tune --trace philly.csv --start 2017-10-01 --end 2017-12-01
    --cluster-per-vc vc_sizes_quarter.csv --preempt-cost 60 --policy las
    --param policy.las.thresholds_gpu_s=3600,36000:100000,3000000
    --param policy.las.starvation_factor=none:4
    --output proposed.toml --report tune-report"""

CURRENT = "current"


def tune(
    trace: Path = W.TraceOpt,
    fmt: str = W.FormatOpt,
    param: List[str] = typer.Option([], "--param", help="KEY=V1:V2...; repeat for each setting"),
    config: Optional[Path] = typer.Option(
        None, "--config", help="the current site config (default: the defaults)"
    ),
    policy: str = typer.Option("las", "--policy", help="the policy replayed"),
    objective: str = typer.Option("avg_jct", "--objective", help=", ".join(T.OBJECTIVES)),
    constraint: List[str] = typer.Option([], "--constraint", help="e.g. 'worst_rho<=1.2'; repeat"),
    split: float = typer.Option(
        0.5, "--split", help="the part of the window tuned on (the rest judges)"
    ),
    min_jobs: int = typer.Option(
        T.MIN_JOBS_PER_PART,
        "--min-jobs",
        min=1,
        help="the fewest jobs each part of the split must hold: fewer say little about a setting",
    ),
    trials: Optional[int] = typer.Option(
        None,
        "--trials",
        min=1,
        help="at most this many candidates (default: the whole grid; fewer: Optuna's TPE search)",
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the search (--trials)"),
    start: Optional[str] = W.StartOpt,
    end: Optional[str] = W.EndOpt,
    nodes: Optional[int] = W.NodesOpt,
    gpus_per_node: Optional[int] = W.GpusPerNodeOpt,
    cluster_per_vc: Optional[Path] = W.ClusterPerVcOpt,
    preempt_cost: Optional[str] = W.preempt_cost_opt("--config's [preemption]"),
    no_fairness: bool = W.NoFairnessOpt,
    workers: Optional[int] = W.jobs_opt("; --trials batches by it"),
    via_slurm: bool = W.ViaSlurmOpt,
    partition: Optional[str] = W.partition_opt("Slurm's default"),
    time_limit: Optional[str] = W.time_opt("60"),
    output: Optional[Path] = typer.Option(
        None, "--output", help="write the proposed site config here"
    ),
    report: Optional[Path] = W.ReportOpt,
    as_json: bool = W.JsonOpt,
) -> None:
    with expected_errors():
        _tune(**locals())


def _tune(
    trace,
    fmt,
    param,
    config,
    policy,
    objective,
    constraint,
    split,
    min_jobs,
    trials,
    seed,
    start,
    end,
    nodes,
    gpus_per_node,
    cluster_per_vc,
    preempt_cost,
    no_fairness,
    workers,
    via_slurm,
    partition,
    time_limit,
    output,
    report,
    as_json,
) -> None:
    from ..sim.ranking.ranker import make_ranker
    from ..sim.workloads.traces import parse_time

    # everything checked before the first replay
    if not param:
        raise T.TuneError("give at least one --param KEY=V1:V2...")
    key, sign, what = T.parse_objective(objective)
    limits = [T.parse_constraint(c) for c in constraint]
    try:
        make_ranker(policy)
    except ValueError as e:
        raise SlurmDLError(f"--policy: {e}") from None
    base, text, base_dir = _base(config)
    known = T.known_settings(base, base_dir)
    params = [T.parse_param(p, known) for p in param]
    dup = [p.key for i, p in enumerate(params) if p.key in [q.key for q in params[:i]]]
    if dup:
        raise T.TuneError(f"--param {dup[0]}: given twice; give every value in one --param")
    points = T.check_candidates(base, params, base_dir)
    if nodes is None and cluster_per_vc is None and config is None:
        raise T.TuneError(
            "give the cluster: --nodes N, --cluster-per-vc FILE or --config SITE.toml"
        )
    for target in (output, report):
        _writable(target)
    try:
        t0 = parse_time(start) if start else None
        t1 = parse_time(end) if end else None
    except ValueError as e:
        raise SlurmDLError(str(e)) from None
    from ..sim.whatif.run import read_jobs

    jobs, _imported, _described = read_jobs(
        trace,
        fmt,
        t0,
        t1,
        keep_cpu=False,
        skip_bad=False,
        group_by="account",
        say=lambda m: typer.echo(m, err=True),
    )
    cut, n_in, n_out = T.split_time([j.submit_time for j in jobs], split, min_jobs)
    early = [j for j in jobs if j.submit_time < cut]
    late = [j for j in jobs if j.submit_time >= cut]
    via = _via(via_slurm, partition, time_limit)
    run = _Runner(
        trace,
        policy,
        params,
        base,
        base_dir,
        dict(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            cluster_per_vc=cluster_per_vc,
            preempt_cost=preempt_cost,
            no_fairness=no_fairness,
        ),
        workers,
        via,
    )

    def say(m: str) -> None:
        typer.echo(m, err=True)

    say(
        f"{len(jobs)} jobs: tuning on {n_in} (before {_when(cut)}), judging on {n_out}; "
        f"{len(points)} candidate{'s' if len(points) != 1 else ''}"
    )
    current = T.Point((), CURRENT, {})
    inside = _search(run, early, points, trials, seed, key, sign, say)
    inside.update(run(early, [current]))
    best, ranked = T.choose(
        {p: s for p, s in inside.items() if p is not current}, key, sign, limits, current=known
    )
    if (
        best is not None
        and all(c.holds(inside[current]) for c in limits)
        and T.score(inside[current], key, sign) <= T.score(inside[best], key, sign)
    ):
        best = current  # no candidate beats the current settings where the search looked
    outside = run(late, [current] + list(dict.fromkeys(ranked)))
    say(f"judged on the later part: {len(outside)} replays")
    doc = _doc(
        params,
        what,
        key,
        sign,
        limits,
        inside,
        outside,
        current,
        best,
        jobs=len(jobs),
        n_in=n_in,
        n_out=n_out,
        cut=cut,
        policy=policy,
    )
    proposed = None
    if best is not None:
        changed = T.changed(best.settings, known)
        doc["changed"] = {k: list(v) if isinstance(v, tuple) else v for k, v in changed.items()}
        proposed = T.proposed_text(text, changed)
        doc["diff"] = T.unified_diff(text, proposed, config.name if config else "site.toml")
        if output:
            output.write_text(proposed)
            doc["output"] = str(output)
    if report:
        from ..sim.reports.tune_report import write_report

        doc["report"] = str(write_report(report, doc))
    if as_json:
        typer.echo(json.dumps(_finite(doc)))
    else:
        _print(doc, say)
    if best is None:
        raise typer.Exit(1)


def _base(config: Path | None) -> tuple[dict, str, Path | None]:
    if config is None:  # the defaults, on a one-type cluster whose shape the flags give
        from ..core.config import cluster_only

        return cluster_only(), "", None
    try:
        text = config.read_text()
    except OSError as e:
        raise SlurmDLError(f"--config {config}: cannot read it: {e.strerror or e}") from None
    try:
        return tomllib.loads(text), text, config.parent
    except tomllib.TOMLDecodeError as e:
        raise SlurmDLError(f"--config {config}: not valid TOML: {e}") from None


def _writable(target: Path | None) -> None:
    if target is None:
        return
    parent = target if target.suffix == "" and not target.is_file() else target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SlurmDLError(f"cannot write {target}: {e.strerror or e}") from None


def _via(via_slurm, partition, time_limit):
    if not via_slurm:
        if partition or time_limit:
            raise SlurmDLError("--partition, --time: only with --via-slurm")
        return None
    from ..slurm.sim_array import parse_time_limit

    return partition, parse_time_limit(time_limit)


def _when(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M")


class _Runner:
    """Replays candidates on a part of the history through simulate's runner (local
    processes, or a Slurm job array); one summary per candidate."""

    def __init__(self, trace, policy, params, base, base_dir, shape, workers, via):
        self.trace, self.policy, self.params = trace, policy, params
        self.base, self.base_dir, self.shape = base, base_dir, shape
        self.workers, self.via = workers, via

    def __call__(self, jobs, points) -> dict:
        from ..sim.ranking.ranker import load_prior
        from ..sim.whatif.plan import default_prior, plan, replay
        from ..sim.whatif.progress import Progress
        from ..sim.whatif.setup import variant

        variants = []
        for i, pt in enumerate(points):
            cfg = T.candidate_config(
                self.base, self.params[: len(pt.values)], pt.values, self.base_dir
            )
            variants.append(
                variant(
                    None,
                    f"#{i}",
                    jobs,
                    nodes=self.shape["nodes"],
                    gpus_per_node=self.shape["gpus_per_node"],
                    cluster_per_vc=self.shape["cluster_per_vc"],
                    preempt_cost=self.shape["preempt_cost"],
                    checkpoint_interval=None,
                    las_thresholds=[],
                    starvation=None,
                    spread=False,
                    model_info=None,
                    no_fairness=self.shape["no_fairness"],
                    idle=False,
                    idle_action=None,
                    utilisation=None,
                    synthetic_idle=None,
                    cluster_line=None,
                    cfg=cfg,
                )
            )
        planned = plan([self.policy], variants, [], len(variants) > 1)
        prior_path = default_prior(self.trace)
        prior = load_prior(prior_path) if prior_path and "gittins" in self.policy else []
        runs, interrupted, failed = replay(
            planned,
            jobs,
            variants,
            prior=prior,
            deadline_boost=None,
            slurm_backfill=False,
            progress=Progress(enabled=False),
            alert=lambda m: typer.echo(m, err=True),
            workers=self.workers,
            keep_results=False,
            via_slurm=self.via,
        )
        if interrupted:
            raise typer.Exit(130)
        if failed:
            raise SlurmDLError(f"{len(failed)} replay(s) failed; nothing proposed")
        out = {}
        for r in runs:
            v = planned[r.planned][3]
            out[points[variants.index(v)]] = r.summary
        return out


def _search(run, jobs, points, trials, seed, key, sign, say) -> dict:
    """Every candidate (the grid) or ``trials`` of them chosen by Optuna's TPE, in batches."""
    if trials is None or trials >= len(points):  # the whole grid, in one batch
        out = run(jobs, points)
        say(f"searched {len(out)} of {len(points)}")
        return out
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    batch = max(2, run.workers or 2)
    total = trials
    results: dict = {}
    while len(results) < total:
        asked = []
        for _ in range(min(batch, total - len(results))):
            t = study.ask()
            i = t.suggest_categorical("point", list(range(len(points))))
            asked.append((t, points[i]))
        fresh = list(dict.fromkeys(p for _, p in asked if p not in results))
        if fresh:
            results.update(run(jobs, fresh))
        for t, p in asked:
            study.tell(t, T.score(results[p], key, sign))
        say(f"searched {len(results)} of {total}")
        if not fresh and len(results) >= len(points):
            break
    return results


def _row(pt, s_in, s_out, key, limits) -> dict:
    return {
        "label": pt.label,
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in pt.settings.items()},
        "in_sample": s_in.get(key) if s_in else None,
        "out_of_sample": s_out.get(key) if s_out else None,
        "meets": all(c.holds(s_in) for c in limits) if s_in else None,
        "out_meets": all(c.holds(s_out) for c in limits) if s_out else None,
        "in": {k: s_in.get(k) for k in _FIGS} if s_in else None,
        "out": {k: s_out.get(k) for k in _FIGS} if s_out else None,
    }


_FIGS = (
    "avg_jct_s",
    "median_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "max_rho",
    "preemptions_per_job",
    "deadline_miss_rate",
    "utility_fraction",
    "best_effort_avg_jct_s",
)


def _doc(params, what, key, sign, limits, inside, outside, current, best, **meta) -> dict:
    rows = [_row(p, inside.get(p), outside.get(p), key, limits) for p in inside if p is not current]
    cur = _row(current, inside[current], outside[current], key, limits)
    doc = {
        "objective": what,
        "objective_key": key,
        "minimise": sign > 0,
        "constraints": [str(c) for c in limits],
        **meta,
        "params": [{"key": p.key, "values": list(p.raw)} for p in params],
        "current": cur,
        "candidates": rows,
        "proposal": None,
    }
    doc["sensitivity"] = {
        k: [[r, v] for r, v in vs]
        for k, vs in T.sensitivity(
            params, {p: s for p, s in inside.items() if p is not current}, key, sign
        ).items()
    }
    outs = {p: s for p, s in outside.items() if p is not current}
    best_out, _ = T.choose(outs, key, sign, limits)
    if best_out is not None:
        doc["best_out_of_sample"] = _row(
            best_out, inside.get(best_out), outs[best_out], key, limits
        )
    if best is not None:
        prop = _row(best, inside[best], outside[best], key, limits)
        doc["proposal"] = prop
        c, p = cur["out_of_sample"], prop["out_of_sample"]
        doc["proposal_vs_current_out"] = p / c if c else None
        if best_out is not None:
            b = doc["best_out_of_sample"]["out_of_sample"]
            doc["proposal_vs_best_out"] = p / b if b else None
        doc["per_account_out"] = _accounts(outside[current], outside[best])
    return doc


def _accounts(cur: dict, prop: dict) -> list:
    a, b = cur.get("per_account") or {}, prop.get("per_account") or {}
    rows = []
    for acct in sorted(set(a) & set(b)):
        x, y = a[acct].get("avg_jct_s"), b[acct].get("avg_jct_s")
        rows.append(
            {
                "account": acct,
                "jobs": a[acct].get("jobs"),
                "current_avg_jct_s": x,
                "proposed_avg_jct_s": y,
                "ratio": (y / x) if x else None,
                "current_rho": a[acct].get("rho"),
                "proposed_rho": b[acct].get("rho"),
            }
        )
    return rows


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _num(v) -> str:
    return "-" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}")


def _print(doc, say) -> None:
    echo = typer.echo
    echo(f"{doc['objective']}; tuned on {doc['n_in']} jobs, judged on {doc['n_out']}")
    echo(f"{'settings':<54} {'tuned on':>11} {'judged on':>11}")
    cur = doc["current"]
    echo(f"{'current':<54} {_num(cur['in_sample']):>11} {_num(cur['out_of_sample']):>11}")
    for r in sorted(
        doc["candidates"],
        key=lambda r: (
            (r["in_sample"] is None, r["in_sample"] or 0)
            if doc["minimise"]
            else (r["in_sample"] is None, -(r["in_sample"] or 0))
        ),
    ):
        mark = " *" if doc["proposal"] and r["label"] == doc["proposal"]["label"] else ""
        flag = "" if r["meets"] in (None, True) else " (fails a constraint)"
        label = r["label"] + flag
        if len(label) > 54:  # a long one on a line of its own
            echo(label)
            label = ""
        echo(f"{label:<54} {_num(r['in_sample']):>11} {_num(r['out_of_sample']):>11}{mark}")
    if doc["proposal"] is None:
        say("no candidate meets every constraint: nothing proposed")
        return
    p = doc["proposal"]
    echo(f"proposed (*): {p['label']}")
    if doc.get("proposal_vs_current_out") is not None:
        echo(
            f"on the part the search never saw: {doc['proposal_vs_current_out']:.3f}x the current "
            f"settings, {doc.get('proposal_vs_best_out') or math.nan:.3f}x the best candidate there"
        )
    ratio = doc.get("proposal_vs_current_out")
    if ratio is not None and (ratio > 1.0 if doc["minimise"] else ratio < 1.0):
        echo("note: on the later part the proposal does worse than the current settings;")
        echo("      the setting does not carry over to new work: keep the current one")
    if not doc.get("changed"):
        echo("the current settings are as good as any candidate: nothing to change")
    elif doc.get("diff"):
        echo(doc["diff"].rstrip("\n"))
    for k in ("output", "report"):
        if doc.get(k):
            echo(f"wrote {doc[k]}")
