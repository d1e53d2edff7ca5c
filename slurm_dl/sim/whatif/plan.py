"""A what-if's runs and where their replays run.

:func:`plan` lists the runs (a policy under one site config with one set of LAS thresholds);
:func:`replay` runs their replays (each run's cluster runs and fairness runs are independent
tasks) here, in local processes (:mod:`slurm_dl.sim.runner`) or as one Slurm job array
(:mod:`slurm_dl.slurm.sim_array`), and hands each run over once it and every run before it
have finished, so what the caller shows is the same whatever ran them."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple

from ...core.errors import SlurmDLError
from .setup import wrap

SITE_POLICY = "site"  # --policy site: each config's own [policy] mix
SITE_GROUP = "\0site"  # its rows' group in the table (no policy label can be this)


class Planned(NamedTuple):
    """One run: its label in the table, the policy's name, the LAS thresholds (or None), the
    variant (site config) and its group in the table (the rows of one policy)."""

    label: str
    name: str
    thresholds: list | None
    variant: object
    group: str


def default_prior(trace: Path) -> Path | None:
    """The Gittins prior beside the shared traces (Tiresias' job durations), when there is one."""
    for cand in (
        trace.parent.parent / "tiresias" / "yarn-gput1000.csv",
        Path(__file__).resolve().parents[3].parent
        / "shared"
        / "traces"
        / "tiresias"
        / "yarn-gput1000.csv",
    ):
        if cand.is_file():
            return cand
    return None


def plan(policy, variants, configs, several) -> list[Planned]:
    """The runs to make, each policy's under each variant; side by side (``several``
    variants): each policy's rows together, in the variants' order."""
    from ..ranking.ranker import make_ranker

    planned = []
    for asked in policy:
        if asked != SITE_POLICY:  # site: each config's own mix (the default config's: combined)
            try:
                make_ranker(asked)  # fail fast on a bad name
            except ValueError as e:
                raise SlurmDLError(f"--policy: {e}") from None
        for v in variants:
            name = v.cfg.policy.mix if asked == SITE_POLICY else asked
            sets = (
                v.thr_sets
                if name in ("las", "deadline-las") and len(v.thr_sets) > 1
                else [v.thr_sets[0] if v.thr_sets else None]
            )
            for thr in sets:
                label = name if len(sets) == 1 else f"{name}[{','.join(f'{x:g}' for x in thr)}]"
                if asked == SITE_POLICY:
                    label = f"site: {label}"
                planned.append(
                    Planned(label, name, thr, v, SITE_GROUP if asked == SITE_POLICY else label)
                )
    if several:  # side by side: each policy's rows together, in the configs' order
        order = list(dict.fromkeys(p[4] for p in planned))
        planned.sort(key=lambda p: (order.index(p[4]), variants.index(p[3])))
    return planned


def via_slurm_choice(
    via_slurm: bool, partition: str | None, time_limit: str | None, first_cfg
) -> tuple | None:
    """--via-slurm: (partition, minutes per task), the first --config's [simulate] giving the
    defaults; None: the replays run here."""
    if via_slurm:
        from ...slurm.sim_array import parse_time_limit

        sc = getattr(first_cfg, "simulate", None)
        return (
            partition or (sc.partition if sc else None),
            parse_time_limit(time_limit)
            if time_limit
            else (sc.time_minutes if sc else parse_time_limit(None)),
        )
    if partition or time_limit:
        raise SlurmDLError("--partition, --time: only with --via-slurm")
    return None


def replay(
    planned,
    jobs,
    variants,
    *,
    prior,
    deadline_boost,
    slurm_backfill,
    progress,
    alert: Callable[[str], None],
    workers=None,
    keep_results=True,
    via_slurm=None,
    on_run: Callable | None = None,
):
    """Run the planned policies' replays (each policy's cluster runs and fairness runs are
    independent tasks: here, or in ``workers`` local processes) and hand each policy's run to
    ``on_run`` once it and every policy before it have finished, so the output is the same
    whatever ran them; (runs, interrupted, failed replays). ``via_slurm``: (partition, time
    limit in minutes) to run them as one Slurm job array instead. ``keep_results``: keep each
    run's per-job results (plots, the report); otherwise only its summary, so memory stays flat
    as policies finish. ``alert``: a line for stderr (an interruption, a failed array task)."""
    from ..engine.loop import ClusterResult
    from ..reports.report import ReportRun
    from ..runner import RankerRecipe, ReplayFailed, Task, run_tasks, workers_for
    from ..simulate import clusters_for, merge, replays, run_replay

    several = len(variants) > 1
    factories = [
        RankerRecipe(
            name, thr, v.starvation, prior, deadline_boost, v.setup.shares, v.cfg, slurm_backfill
        )
        for _label, name, thr, v, _group in planned
    ]
    per_run = [replays(jobs, p[3].setup) for p in planned]
    tasks = [Task(k, t) for k, ts in enumerate(per_run) for t in ts]
    # each policy's replays largest first, policies in their order: rows come in early and the
    # small fairness runs fill the last gaps
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i][0], -tasks[i][1].jobs))
    outputs: list[dict] = [{} for _ in planned]
    runs: list[ReportRun] = []
    failed_runs: set[int] = set()
    cursor = [0]  # the next planned run to hand over

    def execute(task, on_finish):
        k, t = task
        v = planned[k][3]  # no per-job results wanted: only the summary comes back
        return run_replay(
            jobs,
            factories[k],
            v.setup,
            t,
            on_finish=on_finish,
            summary_only=not keep_results and v.idle is None,
        )

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
        while cursor[0] < len(planned) and (
            cursor[0] in failed_runs or len(outputs[cursor[0]]) == len(per_run[cursor[0]])
        ):
            if cursor[0] not in failed_runs:
                _finish_run(cursor[0])
            cursor[0] += 1

    def _finish_run(k):
        label, _name, _thr, v, group = planned[k]
        summary, results = merge(v.setup, [outputs[k][t] for t in per_run[k]])
        outputs[k] = {t: None for t in per_run[k]}  # the merged run holds them now
        if v.idle is not None:
            from ..idle_replay import what_if

            summary["idle"] = {
                **v.idle["label"],
                **what_if(
                    jobs, v.idle["outcomes"], v.idle["config"], factories[k], v.setup, results
                ),
            }
        progress.clear()
        runs.append(
            ReportRun(
                label, v.label if several else None, summary, results if keep_results else [], k
            )
        )
        if on_run is not None:
            on_run(runs[-1])

    interrupted = False
    failed = []
    progress.begin_tasks(len(tasks), sum(t.jobs for t in tasks))
    try:
        if via_slurm is not None:
            only = [not keep_results and p[3].idle is None for p in planned]
            failed = via_slurm_array(
                tasks,
                jobs,
                factories,
                planned,
                via_slurm,
                only,
                on_done=lambda i, o: on_done(i, unpack(i, o)),
                tick=progress.tick,
                name_of=lambda i: task_name(planned[tasks[i].run], tasks[i].replay, several),
                alert=alert,
                progress=progress,
            )
            failed_runs.update(tasks[f.index].run for f in failed)
            _advance()
        else:
            run_tasks(
                tasks,
                execute,
                on_done,
                workers=workers_for(workers, tasks, lambda t: t.jobs),
                order=order,
                tick=progress.tick,
                pack=_pack,
                unpack=unpack,
            )
    except ReplayFailed as e:
        progress.clear()
        v = planned[tasks[e.index][0]][3]
        raise SlurmDLError(f"{v.label}: {e.error}" if several else str(e.error)) from None
    except KeyboardInterrupt:
        progress.clear()
        interrupted = True
        alert(f"interrupted: {len(runs)} of {len(planned)} runs finished; writing those")
    progress.clear()
    return runs, interrupted, failed


def task_name(plan, replay, several: bool) -> str:
    """A replay in words: ``las: the shared cluster``, ``las: account vc1 alone``."""
    label = plan[0] if not several else f"{plan[0]} @ {plan[3].label}"
    if replay.kind == "cluster":
        return (
            f"{label}: the {replay.name} cluster"
            if replay.name == "shared"
            else f"{label}: cluster {replay.name}"
        )
    return f"{label}: account {replay.name} alone"


def via_slurm_array(
    tasks, jobs, recipes, planned, via, summary_only, *, on_done, tick, name_of, alert, progress
) -> list:
    """The replays as one Slurm job array; the failed ones (each said, with its log)."""
    from ...slurm.sim_array import WorkFolder, run_array

    partition, minutes = via
    work = WorkFolder.create(
        Path.cwd()
    )  # fresh, unguessable, 0700; refused where others could swap it
    folder = work.path

    def say(line: str) -> None:  # a path stays whole on a line of its own
        progress.clear()
        text, _, path = line.partition("\0")
        alert(wrap(text) + (f"\n  {path}" if path else ""))

    inputs = {
        "jobs": jobs,
        "recipes": recipes,
        "setups": [p[3].setup for p in planned],
        "summary_only": summary_only,
    }
    failed = run_array(
        tasks,
        inputs,
        on_done,
        work=work,
        partition=partition,
        time_min=minutes,
        name_of=name_of,
        tick=tick,
        say=say,
    )
    progress.clear()
    for f in failed:
        say(f"replay {name_of(f.index)} (Slurm job {f.job_id}) failed: {f.why}; its log:\0{f.log}")
    if failed:
        say(f"the other replays' results are shown; the work folder stays:\0{folder}")
    return failed


def _pack(output):
    """A replay's output as it crosses from a worker process (see ``ClusterResult.packed``)."""
    return output.packed() if hasattr(output, "packed") else output
