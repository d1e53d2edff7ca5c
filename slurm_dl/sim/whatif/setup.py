"""A what-if's replay settings, one :class:`Variant` per site config (without one, the default
config on the cluster the options give: what a site that sets nothing else deploys): the cluster (a size, a group per VC, node groups of several GPU types,
the live cluster's), the preemption cost, the LAS thresholds, the idle policy's outcomes and
the scheduler's dispatch overheads. A problem is a :class:`SlurmDLError` naming the option."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ...core.errors import SlurmDLError, TraceError


def parse_thresholds(text: str) -> list[float]:
    """``--las-thresholds 3250,7200,18000``: increasing GPU-seconds."""
    try:
        vals = [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise SlurmDLError(
            f"--las-thresholds: got {text!r}; allowed: increasing GPU-seconds like 3250,7200,18000"
        )
    if (
        not vals
        or any(v <= 0 or not math.isfinite(v) for v in vals)
        or any(b <= a for a, b in zip(vals, vals[1:]))
    ):
        raise SlurmDLError(
            f"--las-thresholds: got {text!r}; allowed: positive, strictly increasing GPU-seconds"
        )
    return vals


def wrap(text: str) -> str:
    """A long information line folded to 80 columns (continuations indented)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, 80, subsequent_indent="  ", break_on_hyphens=False))


@dataclass
class Variant:
    """One site config's replay settings (without --config: the default config's on the
    options' cluster); ``overrides``: the options that replaced a setting of it."""

    path: Path | None
    label: str | None
    cfg: object
    setup: object
    cost: object
    thr_sets: list
    starvation: float | None
    cluster: str
    idle: dict | None
    overrides: list = field(default_factory=list)

    @property
    def config_line(self) -> str:
        """Which config the replays run, and the options that override it, in words."""
        what = f"site config {self.label}" if self.path else "site config: the defaults"
        if not self.path:
            what += " (no --config)"
        if self.overrides:
            what += "; overridden by " + ", ".join(self.overrides)
        return what


def _with(model, path: tuple[str, ...], value):
    """``model`` with the field at ``path`` (section names, then the field) set to ``value``."""
    head, *rest = path
    new = _with(getattr(model, head), tuple(rest), value) if rest else value
    return model.model_copy(update={head: new})


def apply_options(cfg, *, thr_sets, starvation, preempt_cost, deadline_boost, idle_action):
    """The site config with what the options set in its place, and those options' names: a
    replay under flags is the replay of the config they describe (the lease decision, the
    guards and the policies all read it). A sweep of several LAS threshold sets keeps the
    config's own; each run takes its set."""
    given = []
    if len(thr_sets) == 1:
        cfg = _with(cfg, ("policy", "las", "thresholds_gpu_s"), list(thr_sets[0]))
    if thr_sets:
        given.append("--las-thresholds")
    if starvation is not None:
        cfg = _with(cfg, ("policy", "las", "starvation_factor"), starvation or None)
        given.append("--starvation")
    if preempt_cost is not None:
        try:
            restart = float(preempt_cost)
        except ValueError:  # helios: per width, no one value for the config
            restart = None
        if restart is not None:
            cfg = _with(cfg, ("preemption", "restart_delay_seconds"), restart)
        given.append("--preempt-cost")
    if deadline_boost is not None:
        cfg = _with(cfg, ("policy", "deadline", "boost_slack_minutes"), deadline_boost / 60.0)
        given.append("--deadline-boost")
    if idle_action is not None:
        given.append("--idle-action")
    return cfg, given


def config_labels(paths: list[Path]) -> list[str]:
    """Each config's file name; with the parent folder where two share a name."""
    names = [p.name for p in paths]
    labels = [
        str(Path(p.parent.name) / p.name) if names.count(p.name) > 1 else p.name for p in paths
    ]
    if len(set(labels)) < len(labels):
        raise SlurmDLError(
            "--config: the same file is given twice; give two different site configs"
        )
    return labels


def preemption_cost(preempt_cost: str | None, checkpoint_interval: float | None, cfg):
    """--preempt-cost when given; otherwise the site config's [preemption]
    restart_delay_seconds (the default config's without --config). Work since the last checkpoint is lost only
    with --checkpoint-interval: the prioritizer signals a job to checkpoint before requeueing
    it, so by default a preempted job loses no work."""
    from ..engine.state import PreemptionCost

    try:
        if preempt_cost is not None:
            return PreemptionCost.parse(preempt_cost, checkpoint_interval)
        return PreemptionCost(float(cfg.preemption.restart_delay_seconds), checkpoint_interval)
    except ValueError as e:
        raise SlurmDLError(str(e)) from None


def variant(
    path,
    label,
    jobs,
    *,
    nodes,
    gpus_per_node,
    cluster_per_vc,
    preempt_cost,
    checkpoint_interval,
    las_thresholds,
    starvation,
    spread,
    model_info,
    no_fairness,
    idle,
    idle_action,
    utilisation,
    synthetic_idle,
    cluster_line,
    asked=None,
    live=None,
    recorded=False,
    cfg=None,
    load=None,
    deadline_boost=None,
    power_save=None,
) -> Variant:
    """The replay settings of the site config at ``path`` (read with ``load``), or of ``cfg``
    (already read), or of the default config on the options' cluster (neither); the options
    given override the config's settings (:func:`apply_options`)."""
    from ...core.config import cluster_only, parse_config
    from ..simulate import SimSetup
    from ..workloads.traces import read_cluster_sizes

    defaults = cfg is None and not path
    if cfg is None and path:
        cfg = load(path)
    per = gpus_per_node if gpus_per_node is not None else (cfg.max_gpus_per_node if cfg else 8)
    n = nodes
    if n is None and cfg and not cluster_per_vc:
        n = cfg.total_gpus // per
    if defaults:  # the default config; its cluster is the one the options give
        cfg = parse_config(cluster_only(nodes or 1, per), "the default config")
    thr_given = [parse_thresholds(t) for t in las_thresholds]
    cfg, overrides = apply_options(
        cfg,
        thr_sets=thr_given,
        starvation=starvation,
        preempt_cost=preempt_cost,
        deadline_boost=deadline_boost,
        idle_action=idle_action,
    )
    if not defaults:  # the cluster the options give in place of the config's
        overrides[:0] = [
            o for o, v in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node)) if v
        ]
    thr_sets = thr_given or [list(cfg.policy.las.thresholds_gpu_s)]
    starv = cfg.policy.las.starvation_factor
    cost = preemption_cost(preempt_cost, checkpoint_interval, cfg)
    minfo = json.loads(Path(model_info).read_text()) if model_info else None
    sizes = read_cluster_sizes(cluster_per_vc) if cluster_per_vc else None
    setup = SimSetup(
        gpus_per_node=per,
        cluster_sizes=sizes,
        nodes=n,
        cost=cost,
        spread=spread,
        model_info=minfo,
        fairness=not no_fairness,
        shares=dict(cfg.policy.fairshare.shares),
        power=power_setting(power_save, cfg.power),
    )
    typed = _typed(
        asked,
        None if defaults else cfg,
        gpus_per_node,
        live,
        recorded,
        sizes,
        spread,
        cfg_groups=nodes is None and not cluster_per_vc,
    )  # --nodes N: the size given
    if typed is not None:
        setup.groups, setup.types = typed.groups, typed.types
        cluster = typed.line
    elif sizes is not None:
        cluster = f"each group its own cluster ({cluster_per_vc.name}), {per} GPUs per node"
    elif n:
        cluster = f"{n} node{'s' if n != 1 else ''} x {per} GPUs ({n * per} GPUs)" + (
            " from Slurm" if cluster_line else ""
        )
    else:
        cluster = "no cluster size given"
    idle_outcomes = (
        idle_setup(jobs, cfg, idle_action, utilisation, synthetic_idle) if idle else None
    )
    return Variant(
        path, label, cfg, setup, cost, thr_sets, starv, cluster, idle_outcomes, overrides
    )


def power_setting(text: str | None, power_cfg):
    """``--power-save`` with the config's ``[power]`` model, or None (not given)."""
    from ..engine.power import PowerSave

    if text is None:
        return None
    try:
        return PowerSave.parse(text, power_cfg)
    except ValueError as e:
        raise SlurmDLError(str(e)) from None


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
        raise SlurmDLError(
            "--spread: not with several GPU types or node sizes (a job's GPUs are all of one group)"
        )
    return typed


def live_cluster(gpus_per_node: int | None) -> tuple[int, int, str, list]:
    """(nodes, GPUs per node, a line describing it, node groups by type and size) from the live
    cluster's GPU nodes."""
    from collections import Counter

    from ...core.errors import SlurmError
    from ...slurm import get_backend
    from ..engine.fleet import groups_from_nodes, several_types

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
    shape = (
        f"cluster from Slurm: {len(nodes)} GPU nodes, {total} GPUs"
        f"{' (' + ', '.join(types) + ')' if types else ''}; partitions: {', '.join(parts) or '-'}"
    )
    groups = groups_from_nodes(nodes)
    if any(n.gpus != per for n in nodes) and not several_types(groups):
        shape += f"; simulated as {len(nodes)} x {per} GPUs (nodes differ)"
    return len(nodes), per, shape, groups


def idle_setup(jobs, cfg, idle_action, utilisation, synthetic_idle) -> dict:
    """The idle policy's config and per-job outcomes (computed once: they do not depend on the
    scheduling policy), and how the utilisation was obtained."""
    from ...core.config import TelemetryConfig
    from ..idle_replay import judge_all
    from ..workloads.traces import attach_utilisation, read_utilisation
    from ..workloads.utilisation import parse_synthetic, profiles_of, synthetic_profiles

    tcfg = cfg.telemetry if cfg else TelemetryConfig()
    if idle_action is not None:
        if idle_action not in ("report", "warn", "deprioritize", "cancel"):
            raise SlurmDLError(
                f"--idle-action: got {idle_action!r}; allowed: report, warn, deprioritize, cancel"
            )
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
        sources.append(
            f"SYNTHETIC: {made} jobs ({frac:.0%} of those without utilisation, seed {seed}) "
            f"run at 90% then sit idle after a random share of their run"
        )
    if not any(p is not None for p in profiles):
        raise TraceError(
            "--idle-policy: no job has GPU utilisation; give a gpu_util column, "
            "--utilisation FILE or --synthetic-idle FRACTION[:SEED]"
        )
    return {
        "config": tcfg,
        "outcomes": judge_all(jobs, profiles, tcfg),
        "label": {"synthetic": synthetic, "source": "; ".join(sources)},
    }


def dispatch_overhead(text, fmt, jobs, setup) -> dict | None:
    """--dispatch: the overheads to replay with, how they were found (a line, a JSON part)."""
    from ..engine.overhead import estimate_dispatch
    from ..engine.state import Dispatch
    from ..workloads.traces import HISTORY_FORMATS

    if text is None:
        return None
    head, _, tail = str(text).strip().lower().partition(":")
    allowed = "allowed: auto[:PASS], RELEASE[:PASS] (0-3600 s)"
    try:
        pass_s = float(tail) if tail else 0.0
        if head == "auto":
            if fmt not in HISTORY_FORMATS:
                raise SlurmDLError(
                    "--dispatch auto: needs a history (--format sacct-json, sacct or helios)"
                )
            if setup.nodes is None and not setup.groups:
                raise SlurmDLError(
                    "--dispatch auto: needs --cluster-from-slurm, --config, --nodes or --node-types"
                )
            per_type: dict[str, int] = {}
            for g in setup.groups or ():  # several GPU types: each type's jobs wait on its GPUs
                per_type[g.gpu_type] = per_type.get(g.gpu_type, 0) + g.gpus
            total = sum(per_type.values()) if per_type else setup.nodes * setup.gpus_per_node
            est = estimate_dispatch(jobs, total, pass_s, per_type)
            model, line = est.dispatch, est.describe()
            doc = {
                "source": "history",
                "release_s": model.release_s,
                "pass_s": model.pass_s,
                "starts_measured": est.gaps,
                "median_gap_s": est.median_gap_s,
                "p90_gap_s": est.p90_gap_s,
            }
        else:
            model = Dispatch(float(head), pass_s)
            line = f"dispatch overhead: {model.describe()}"
            doc = {"source": "given", "release_s": model.release_s, "pass_s": model.pass_s}
    except ValueError:
        raise SlurmDLError(f"--dispatch: got {text!r}; {allowed}") from None
    return {"model": model, "line": line, "doc": doc}


def setup_lines(asked, variants, dispatch, fmt, jobs, say) -> dict | None:
    """The GPU-type options checked against the clusters, the cluster's types and the dispatch
    overheads said in a line each; returns the overheads (:func:`dispatch_overhead`)."""
    try:
        asked.check_used(any(v.setup.groups for v in variants))
    except ValueError as e:
        raise SlurmDLError(str(e)) from None
    if len(variants) == 1 and variants[0].setup.groups:
        say(wrap(variants[0].cluster))
    overhead = dispatch_overhead(dispatch, fmt, jobs, variants[0].setup)
    if overhead is not None:
        for v in variants:
            v.setup.dispatch = overhead["model"]
        say(wrap(overhead["line"]))
    return overhead
