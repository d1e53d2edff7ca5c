"""One simulation run: split the trace into clusters, run a policy on each, summarise.

Cluster layout:
* per VC (``cluster_sizes`` given): each account is its own cluster of that many nodes; an
  account missing from the file gets the fewest nodes that fit its largest job;
* shared: one cluster of ``nodes`` × ``gpus_per_node`` for every job.

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
from .engine import ClusterResult, ClusterSpec, fewest_nodes, run_cluster
from .metrics import add_fairness, summarize
from .ranking import Ranker
from .state import Dispatch, PreemptionCost


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
    if not setup.nodes:
        raise ValueError("give --nodes (or a site config) or --cluster-per-vc")
    return [(ClusterSpec("shared", setup.nodes, g), list(jobs))]


def runs_per_job(setup: SimSetup) -> int:
    """How many times each job is replayed for one policy (2 with the fairness runs)."""
    return 2 if setup.cluster_sizes is None and setup.fairness else 1


def simulate(jobs: Sequence[Job], make_ranker: Callable[[], Ranker], setup: SimSetup,
             progress=None) -> tuple[dict, list[ClusterResult]]:
    """Run one policy; returns (summary dict, per-cluster results). ``progress``: an object
    with ``update(now, finished)`` and ``next_run(finished)`` (see :mod:`.progress`)."""
    results = []
    tick = progress.update if progress is not None else None
    for spec, js in clusters_for(jobs, setup):
        results.append(run_cluster(js, spec, make_ranker(), setup.cost, spread=setup.spread,
                                   model_info=setup.model_info, on_finish=tick,
                                   dispatch=setup.dispatch))
        if progress is not None:
            progress.next_run(len(js))
    summary = summarize(results)
    if setup.cluster_sizes is None and setup.fairness:
        iso = isolated_jcts(jobs, make_ranker, setup, progress)
        add_fairness(summary, iso)
    elif setup.cluster_sizes is not None:
        add_fairness(summary, {})  # every account already runs alone: rho = 1 by definition
    else:
        add_fairness(summary, None)  # not computed (--no-fairness)
    return summary, results


def isolated_jcts(jobs: Sequence[Job], make_ranker: Callable[[], Ranker], setup: SimSetup,
                  progress=None) -> dict[str, float]:
    groups = by_account(jobs)
    shares = {a: (setup.shares or {}).get(a, 1.0) for a in groups}
    total_share = sum(shares.values())
    out = {}
    for acct, js in groups.items():
        n = max(fewest_nodes(js, setup.gpus_per_node), round((setup.nodes or 0) * shares[acct] / total_share))
        r = run_cluster(js, ClusterSpec(acct, n, setup.gpus_per_node), make_ranker().isolated_copy(), setup.cost,
                        spread=setup.spread, model_info=setup.model_info, dispatch=setup.dispatch,
                        on_finish=progress.update if progress is not None else None)
        if progress is not None:
            progress.next_run(len(js))
        out[acct] = summarize([r])["avg_jct_s"]
    return out
