"""One simulation run: split the trace into clusters, run a policy on each, summarise.

Cluster layout:
* per VC (``cluster_sizes`` given): each account is its own cluster of that many nodes; an
  account missing from the file gets the fewest nodes that fit its largest job;
* shared: one cluster of ``nodes`` × ``gpus_per_node`` for every job;
* node groups (``groups``: several GPU types or node sizes): one shared cluster of them, the
  type choice and speeds in ``types`` (:mod:`.engine.typed`).

Finish-time fairness ρ (shared layout only): each account is also simulated *alone* on its
share of the cluster — ``max(fewest nodes for its largest job, round(nodes × share / Σ shares))``
nodes, shares equal unless given — with the same policy; ρ = its mean JCT in the shared run /
its mean JCT alone. In the per-VC layout every account already runs alone, so ρ = 1.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..core.model import Job
from .engine.loop import ClusterResult, ClusterSpec, fewest_nodes, run_cluster
from .engine.fleet import NodeGroupSpec
from .engine.power import PowerSave
from .engine.typed import TypeSetup
from .engine.typed_jobs import accepted_types
from .reports.metrics import add_fairness, summarize
from .ranking.ranker import Ranker
from .engine.state import Dispatch, PreemptionCost


@dataclass
class SimSetup:
    gpus_per_node: int = 8
    cluster_sizes: dict[str, int] | None = None  # per-VC layout when set
    nodes: int | None = None  # shared layout
    cost: PreemptionCost = field(default_factory=PreemptionCost)
    spread: bool = False
    model_info: dict | None = None
    shares: dict[str, float] | None = None
    fairness: bool = True
    dispatch: Dispatch = field(default_factory=Dispatch)  # the scheduler's overheads (none)
    groups: tuple[NodeGroupSpec, ...] | None = (
        None  # node groups of several GPU types (shared layout)
    )
    types: TypeSetup | None = None  # with groups: the type choice and the throughput model
    power: PowerSave | None = None  # node power states and energy (--power-save); None: off


def by_account(jobs: Sequence[Job]) -> "OrderedDict[str, list[Job]]":
    groups: OrderedDict[str, list[Job]] = OrderedDict()
    for j in jobs:
        groups.setdefault(j.account, []).append(j)
    return groups


def clusters_for(jobs: Sequence[Job], setup: SimSetup) -> list[tuple[ClusterSpec, list[Job]]]:
    g = setup.gpus_per_node
    if setup.cluster_sizes is not None:
        out = []
        for acct, js in sorted(by_account(jobs).items()):
            n = setup.cluster_sizes.get(acct) or fewest_nodes(js, g)
            out.append((ClusterSpec(acct, n, g), js))
        return out
    if setup.groups:
        return [(ClusterSpec.of_groups("shared", setup.groups), list(jobs))]
    if not setup.nodes:
        raise ValueError("give --nodes (or a site config) or --cluster-per-vc")
    return [(ClusterSpec("shared", setup.nodes, g), list(jobs))]


def runs_per_job(setup: SimSetup) -> int:
    """How many times each job is replayed for one policy (2 with the fairness runs)."""
    return 2 if setup.cluster_sizes is None and setup.fairness else 1


def simulate(
    jobs: Sequence[Job], make_ranker: Callable[[], Ranker], setup: SimSetup, progress=None
) -> tuple[dict, list[ClusterResult]]:
    """Run one policy; returns (summary dict, per-cluster results). ``progress``: an object
    with ``update(now, finished)`` and ``next_run(finished)`` (see :mod:`.whatif.progress`).

    The policy's replays are independent :class:`Replay` tasks (:func:`replays`); this runs
    them one after the other here, :mod:`.runner` anywhere else, and :func:`merge` makes the
    same summary of their outputs whatever ran them."""
    tick = progress.update if progress is not None else None
    outputs = []
    for task in replays(jobs, setup):
        outputs.append(run_replay(jobs, make_ranker, setup, task, on_finish=tick))
        if progress is not None:
            progress.next_run(task.jobs)
    return merge(setup, outputs)


@dataclass(frozen=True)
class Replay:
    """One independent replay of a policy: ``kind`` "cluster" (the ``part``-th cluster of
    :func:`clusters_for`) or "alone" (the ``part``-th account alone on its share, for ρ).
    Plain data: it travels to a worker process or a Slurm array task by value; the jobs it
    replays are found there again from the trace."""

    kind: str
    part: int
    name: str  # the cluster's or the account's name
    jobs: int  # how many jobs it replays


def replays(jobs: Sequence[Job], setup: SimSetup) -> list[Replay]:
    """The replays one policy is made of, in the order :func:`merge` expects their outputs."""
    out = [
        Replay("cluster", i, spec.name, len(js))
        for i, (spec, js) in enumerate(clusters_for(jobs, setup))
    ]
    if setup.cluster_sizes is None and setup.fairness:
        out += [
            Replay("alone", i, acct, len(js))
            for i, (acct, js) in enumerate(by_account(jobs).items())
        ]
    return out


@dataclass
class Summarized:
    """The output of a policy's only cluster run when only its summary is wanted (no plots,
    report or idle what-if): made where the replay ran, so no per-job results travel."""

    summary: dict


def run_replay(
    jobs: Sequence[Job],
    make_ranker: Callable[[], Ranker],
    setup: SimSetup,
    task: Replay,
    on_finish=None,
    summary_only: bool = False,
) -> ClusterResult | Summarized | tuple[str, float]:
    """One replay's output: a cluster run's :class:`ClusterResult` (with ``summary_only``,
    for a layout of one cluster, its :class:`Summarized`), or for an "alone" run (account,
    its mean JCT alone)."""
    if task.kind == "cluster":
        clusters = clusters_for(jobs, setup)
        spec, js = clusters[task.part]
        r = run_cluster(
            js,
            spec,
            make_ranker(),
            setup.cost,
            spread=setup.spread,
            model_info=setup.model_info,
            on_finish=on_finish,
            dispatch=setup.dispatch,
            types=setup.types,
            power=setup.power,
        )
        return Summarized(summarize([r])) if summary_only and len(clusters) == 1 else r
    acct, spec, js = alone_clusters(jobs, setup)[task.part]
    r = run_cluster(
        js,
        spec,
        make_ranker().isolated_copy(),
        setup.cost,
        spread=setup.spread,
        model_info=setup.model_info,
        dispatch=setup.dispatch,
        on_finish=on_finish,
        types=setup.types,
        power=setup.power,
    )
    return acct, summarize([r])["avg_jct_s"]


def merge(setup: SimSetup, outputs: Sequence) -> tuple[dict, list[ClusterResult]]:
    """The policy's summary and cluster results from its replays' outputs (in :func:`replays`
    order; no cluster results where its only cluster run came :class:`Summarized`)."""
    results = [o for o in outputs if isinstance(o, ClusterResult)]
    done = [o.summary for o in outputs if isinstance(o, Summarized)]
    summary = done[0] if done else summarize(results)
    if setup.cluster_sizes is None and setup.fairness:
        add_fairness(summary, dict(o for o in outputs if isinstance(o, tuple)))
    elif setup.cluster_sizes is not None:
        add_fairness(summary, {})  # every account already runs alone: rho = 1 by definition
    else:
        add_fairness(summary, None)  # not computed (--no-fairness)
    return summary, results


def alone_clusters(
    jobs: Sequence[Job], setup: SimSetup
) -> list[tuple[str, ClusterSpec, list[Job]]]:
    """Each account alone on its share of the cluster: (account, cluster, its jobs)."""
    groups = by_account(jobs)
    shares = {a: (setup.shares or {}).get(a, 1.0) for a in groups}
    model = setup.types.model if setup.types is not None else None
    speeds = (
        {g.gpu_type: model.type_speed(g.gpu_type) for g in setup.groups}
        if setup.groups and model
        else None
    )
    total_share = sum(shares.values())
    out = []
    for acct, js in groups.items():
        if setup.groups:
            spec = ClusterSpec.of_groups(
                acct, share_of_groups(setup.groups, shares[acct] / total_share, js, speeds)
            )
        else:
            n = max(
                fewest_nodes(js, setup.gpus_per_node),
                round((setup.nodes or 0) * shares[acct] / total_share),
            )
            spec = ClusterSpec(acct, n, setup.gpus_per_node)
        out.append((acct, spec, js))
    return out


def isolated_jcts(
    jobs: Sequence[Job], make_ranker: Callable[[], Ranker], setup: SimSetup, progress=None
) -> dict[str, float]:
    """Each account's mean JCT alone on its share of the cluster."""
    out = {}
    for i, (acct, _spec, js) in enumerate(alone_clusters(jobs, setup)):
        out[acct] = run_replay(
            jobs,
            make_ranker,
            setup,
            Replay("alone", i, acct, len(js)),
            on_finish=progress.update if progress is not None else None,
        )[1]
        if progress is not None:
            progress.next_run(len(js))
    return out


def share_of_groups(
    groups: Sequence[NodeGroupSpec],
    frac: float,
    jobs: Sequence[Job],
    speeds: dict[str, float] | None = None,
) -> list[NodeGroupSpec]:
    """An account's share ``frac`` of every node group (rounded). When its largest job fits no
    group of that share (a multi-node job on a small share), as on one type it gets instead
    the fewest nodes that fit it, or its share if that is more nodes: all of one group, the
    one whose type speed (``speeds``) is nearest the cluster's mean, the rest of the nodes
    from the other groups in proportion to their shares (so the share alone does not hand it
    the fastest GPUs). Groups left without nodes are dropped."""
    nodes = [round(g.nodes * frac) for g in groups]
    big = max(jobs, key=lambda j: j.num_gpus)
    acc = set(accepted_types(big))
    ok = [
        i for i, g in enumerate(groups) if (not acc or g.gpu_type in acc) and g.gpus >= big.num_gpus
    ]
    if ok and not any(nodes[i] * groups[i].gpus_per_node >= big.num_gpus for i in ok):
        sp = speeds or {}
        mean = sum(g.gpus * sp.get(g.gpu_type, 1.0) for g in groups) / sum(g.gpus for g in groups)
        i = min(ok, key=lambda k: (abs(sp.get(groups[k].gpu_type, 1.0) - mean), k))
        need = fewest_nodes([big], groups[i].gpus_per_node)
        budget = max(need, sum(nodes)) - need
        rest = [k for k in range(len(groups)) if k != i and nodes[k]]
        share = sum(nodes[k] for k in rest)
        nodes = [0] * len(groups)
        nodes[i] = need
        for k in rest:
            nodes[k] = min(groups[k].nodes, int(budget * nodes[k] / share)) if share else 0
    if not any(nodes):
        nodes[0] = 1
    return [
        NodeGroupSpec(g.gpu_type, n, g.gpus_per_node, g.name) for g, n in zip(groups, nodes) if n
    ]
