"""Sweep of the information-agnostic policies against the SRTF oracle (and LAS) on one run.

Prints one JSON object (every point: policy, settings, average JCT, ratios against SRTF and
against the reference LAS of the same run, CPU seconds) and one human line per part.

Parts (``--part`` repeatable, default both):
  philly   heavy Philly (Oct–Nov 2017, vc_sizes_quarter.csv, each VC its own cluster, 60 s
           restart cost): LAS thresholds × starvation factor × service unit; Gittins: learnt
           history or one table (keys: GPU count and VC are all Philly has) × the prior's weight
           × the restart-aware hold; QSSF. ``--philly-end`` shortens the window (a quick check).
  chronus  Chronus MIX1 and SLO (user = VC, job name = model) on one shared cluster
           (``--chronus-nodes`` × 8 GPUs, 60 s restart cost), in windows of ``--chronus-jobs``
           jobs starting at ``--chronus-starts``: QSSF by history keys, time limit as predictor
           or not, shrinkage and min_jobs; Gittins; SRTF and LAS (config defaults) per window.
  chronus-gittins  whole Chronus MIX1 and SLO on the same cluster: Gittins by the prior's weight
           × the hold, against SRTF (not in the default parts).
``--preemptive-qssf`` (philly) adds QSSF ranking running jobs too, its config default (CPU-heavy
there; the chronus part always runs both). ``--quick`` runs a few points of each grid. Each
point says which settings are the config models' defaults (``default: true``), so the
defaults can be checked against the sweep.

Usage: python benchmarks/bench_history_sweep.py [--part philly] [--quick]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

from slurm_dl.core.config import GittinsConfig, LasConfig, QssfConfig
from slurm_dl.core.policy import get_policy
from slurm_dl.sim.ranking.ranker import PolicyRanker, load_prior
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.workloads.traces import parse_time, read_cluster_sizes, read_trace


def run(jobs, setup, label: str, name: str, **kw) -> dict:
    t0, w0 = time.process_time(), time.time()
    s, _ = simulate(jobs, lambda: PolicyRanker(get_policy(name, None, **kw), name), setup)
    out = {
        "label": label,
        "policy": name,
        "settings": _plain(kw),
        "avg_jct_s": round(s["avg_jct_s"], 1),
        "p99_jct_s": round(s["p99_jct_s"], 1),
        "preemptions": s.get("preemptions", 0),
        "cpu_s": round(time.process_time() - t0, 2),
        "wall_s": round(time.time() - w0, 2),
    }
    print(f"  {label}: {out['avg_jct_s']} s (cpu {out['cpu_s']} s)", file=sys.stderr, flush=True)
    return out


def _plain(kw: dict) -> dict:
    return {k: v for k, v in kw.items() if k != "prior_samples"}


def ratios(points: list[dict], srtf: float, las: float) -> None:
    for p in points:
        p["vs_srtf"] = round(p["avg_jct_s"] / srtf, 3)
        p["vs_las"] = round(p["avg_jct_s"] / las, 3)


def las_defaults() -> dict:
    d = LasConfig()
    return {
        "thresholds_gpu_s": list(d.thresholds_gpu_s),
        "starvation_factor": d.starvation_factor,
        "service": d.service,
    }


def gittins_defaults() -> dict:
    d = GittinsConfig()
    return {
        "history_keys": d.history_keys,
        "prior_weight": d.prior_weight,
        "hold_factor": d.hold_factor,
        "min_jobs": d.min_jobs,
    }


def part_philly(T: Path, quick: bool, preemptive_qssf: bool, end: str = "2017-12-01") -> dict:
    philly = read_trace(
        T / "philly" / "philly.csv", "philly", parse_time("2017-10-01"), parse_time(end)
    )
    setup = SimSetup(
        cluster_sizes=read_cluster_sizes(T / "philly" / "vc_sizes_quarter.csv"),
        cost=PreemptionCost(60.0),
    )
    prior = load_prior(T / "tiresias" / "yarn-gput1000.csv")
    srtf = run(philly, setup, "srtf", "srtf")
    ref = run(
        philly,
        setup,
        "las 100000,3000000 (previous tuning)",
        "las",
        thresholds_gpu_s=[1e5, 3e6],
        starvation_factor=None,
        service="gpu-seconds",
    )
    dflt = las_defaults()
    points = [run(philly, setup, "las (config defaults)", "las", **dflt)]
    points[-1]["default"] = True
    gd = gittins_defaults()
    points.append(
        run(philly, setup, "gittins (config defaults)", "gittins", prior_samples=prior, **gd)
    )
    points[-1]["default"] = True
    # Gittins: where the distribution comes from (the prior's weight against the cluster's own
    # finished jobs; learnt per key or one table) × the restart-aware hold
    keys = ["none", "full"]  # on Philly "full" is account+GPUs, then account, then all
    weights = [1.0, 0.01] if quick else [1.0, 0.1, 0.01, 0.0]
    holds = [1.0, 4.0] if quick else [1.0, 2.0, 4.0, 8.0]
    for hk in keys:
        for pw in weights:
            for hold in holds:
                kw = {
                    "history_keys": hk,
                    "prior_weight": pw,
                    "hold_factor": hold,
                    "min_jobs": gd["min_jobs"],
                }
                if kw == gd:
                    continue
                points.append(
                    run(
                        philly,
                        setup,
                        f"gittins history={hk} prior_weight={pw:g} hold={hold:g}",
                        "gittins",
                        prior_samples=prior,
                        **kw,
                    )
                )
    if not quick:
        for mj in (10, 30):
            kw = {**gd, "min_jobs": mj}
            points.append(
                run(
                    philly,
                    setup,
                    f"gittins history={gd['history_keys']} min_jobs={mj}",
                    "gittins",
                    prior_samples=prior,
                    **kw,
                )
            )
    for hk in ["account-gpus"] if quick else ["account-gpus", "account"]:
        for pre in (False, True) if preemptive_qssf else (False,):
            points.append(
                run(
                    philly,
                    setup,
                    f"qssf history={hk} preemptive={pre}",
                    "qssf",
                    history_keys=hk,
                    preemptive=pre,
                )
            )
    # LAS: the thresholds around the two best of a coarse grid (100k / 3M GPU-s, 30k / 300k s)
    th_grid = {
        "gpu-seconds": (
            [[1e5, 3e6], [1e5, 2e6], [3e4, 1e6]]
            if quick
            else [
                [3e4, 1e6],
                [1e5, 3e6],
                [7e4, 3e6],
                [1.5e5, 3e6],
                [2e5, 3e6],
                [1e5, 2e6],
                [1e5, 5e6],
                [3e5, 1e7],
                [1e6, 1e7],
                [1e5, 1e6, 1e7],
                [3e4, 3e5, 3e6],
                [1e4, 1e5, 3e6],
                [3e4, 1e5, 3e6],
                [1e5, 3e5, 3e6],
                [1e5, 1e6, 3e6],
            ]
        ),
        "seconds": (
            [[3e4, 3e5], [3e4, 3e5, 1e6]]
            if quick
            else [
                [2e4, 3e5],
                [3e4, 3e5],
                [4e4, 3e5],
                [5e4, 3e5],
                [3e4, 2e5],
                [3e4, 5e5],
                [2e4, 2e5],
                [5e4, 5e5],
                [1e4, 3e4, 3e5],
                [3e4, 1e5, 3e5],
                [3e4, 3e5, 1e6],
                [3e4, 3e5, 3e6],
                [3e3, 3e4, 3e5],
                [1e5, 1e6],
            ]
        ),
    }
    # the starvation guard's runs cost more CPU (many wake-ups): on the anchors only
    st_grid = [None] if quick else [None, 64.0, 16.0, 4.0]
    anchors = ([1e5, 3e6], [3e4, 3e5], [3e4, 3e5, 3e6])
    for st in st_grid:
        for service, ths in th_grid.items():
            for th in ths:
                if st is not None and th not in anchors:
                    continue
                kw = {"thresholds_gpu_s": th, "starvation_factor": st, "service": service}
                if kw == dflt or (st is None and service == "gpu-seconds" and th == [1e5, 3e6]):
                    continue  # run above (the defaults, the reference)
                points.append(
                    run(
                        philly,
                        setup,
                        f"las {service} {','.join(f'{t:g}' for t in th)} S={st}",
                        "las",
                        **kw,
                    )
                )
    ratios([srtf, ref, *points], srtf["avg_jct_s"], ref["avg_jct_s"])
    agnostic = [p for p in points]
    best = min(agnostic, key=lambda p: p["avg_jct_s"])
    return {
        "setup": f"heavy Philly: 2017-10-01 to {end}, quarter VCs, 60 s restart",
        "jobs": len(philly),
        "srtf": srtf,
        "las_reference": ref,
        "points": points,
        "best": best["label"],
        "best_vs_srtf": best["vs_srtf"],
        "best_vs_las": best["vs_las"],
        "goal_vs_srtf": 1.30,
    }


def window(jobs, start: int, n: int) -> list:
    """``n`` jobs from the ``start``-th in submit order, shifted to begin at time 0 (each window
    starts on an empty cluster)."""
    js = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))[start : start + n]
    t0 = js[0].submit_time if js else 0.0
    out = []
    for j in js:
        j = copy.copy(j)
        j.submit_time -= t0
        if j.deadline is not None:
            j.deadline -= t0
        if j.soft_deadlines:
            j.soft_deadlines = tuple((t - t0, v) for t, v in j.soft_deadlines)
        out.append(j)
    return out


def qssf_grid(quick: bool) -> list[tuple[str, dict]]:
    """QSSF settings: the previous default, the config default with and without preemption,
    then one setting at a time around the default (history keys, shrinkage, min_jobs, the
    time limit as a predictor)."""
    d = QssfConfig()
    base = {
        "history_keys": d.history_keys,
        "min_jobs": d.min_jobs,
        "shrink_jobs": d.shrink_jobs,
        "use_time_limit": d.use_time_limit,
        "preemptive": d.preemptive,
    }
    # the previous default's settings (it learnt GPU-seconds, not run time per GPU)
    grid = [
        dict(base, use_time_limit=False, shrink_jobs=0.0, min_jobs=3, preemptive=False),
        base,
        dict(base, preemptive=not d.preemptive),
        dict(base, use_time_limit=not d.use_time_limit),
    ]
    keys = ["full", "global"] if quick else ["full", "no-limit", "user-name", "account", "global"]
    grid += [dict(base, history_keys=k) for k in keys]
    grid += [
        dict(base, shrink_jobs=x)
        for x in ([0.0, 1000.0] if quick else [0.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0])
    ]
    grid += [dict(base, min_jobs=m) for m in ([1] if quick else [1, 10, 30])]
    out, seen = [], []
    for kw in grid:
        if kw in seen:
            continue
        seen.append(kw)
        label = (
            f"qssf keys={kw['history_keys']} time_limit={kw['use_time_limit']} "
            f"shrink={kw['shrink_jobs']:g} min_jobs={kw['min_jobs']} preemptive={kw['preemptive']}"
        )
        out.append((label, kw))
    return out


def part_chronus_gittins(T: Path, quick: bool, nodes: int, traces: list[str]) -> dict:
    """Whole Chronus traces: Gittins (learnt history, the default keys) by the prior's weight and
    the restart-aware hold, against SRTF; the grid the Gittins defaults were chosen on, with
    heavy Philly's."""
    out = {}
    setup = SimSetup(nodes=nodes, gpus_per_node=8, cost=PreemptionCost(60.0), fairness=False)
    gd = gittins_defaults()
    grid = (
        [(1.0, 1.0), (0.1, 4.0)]
        if quick
        else [(1.0, 1.0), (1.0, 4.0), (0.1, 4.0), (0.1, 8.0), (0.01, 4.0), (0.01, 8.0), (1.0, 8.0)]
    )
    for trace in traces:
        jobs = read_trace(T / "chronus" / f"trace_job_Philly_{trace}.csv", "chronus")
        srtf = run(jobs, setup, f"{trace} srtf", "srtf")
        points = []
        for pw, hold in grid:
            p = run(
                jobs,
                setup,
                f"{trace} gittins prior_weight={pw:g} hold={hold:g}",
                "gittins",
                **{**gd, "prior_weight": pw, "hold_factor": hold},
            )
            p["preemptions_per_job"] = round(p["preemptions"] / len(jobs), 3)
            p["default"] = (pw, hold) == (gd["prior_weight"], gd["hold_factor"])
            points.append(p)
        for p in points:
            p["vs_srtf"] = round(p["avg_jct_s"] / srtf["avg_jct_s"], 3)
        out[trace] = {"jobs": len(jobs), "nodes": nodes, "srtf": srtf, "points": points}
    return out


def part_chronus(
    T: Path, quick: bool, nodes: int, n_jobs: int, starts: list[int], traces: list[str]
) -> dict:
    """Each trace cut into windows of ``n_jobs`` jobs (the first at ``starts[0]``): every point
    per window and the geometric mean of its ratios to SRTF over the windows."""
    out = {}
    setup = SimSetup(nodes=nodes, gpus_per_node=8, cost=PreemptionCost(60.0), fairness=False)
    dflt = las_defaults()
    qd = QssfConfig().model_dump(
        include={"history_keys", "min_jobs", "shrink_jobs", "use_time_limit", "preemptive"}
    )
    for trace in traces:
        every = read_trace(T / "chronus" / f"trace_job_Philly_{trace}.csv", "chronus")
        wins = []
        for st in starts:
            jobs = window(every, st, n_jobs)
            tag = f"{trace}@{st}"
            srtf = run(jobs, setup, f"{tag} srtf", "srtf")
            las = run(jobs, setup, f"{tag} las (config defaults)", "las", **dflt)
            points = []
            for label, kw in qssf_grid(quick):
                p = run(jobs, setup, f"{tag} {label}", "qssf", **kw)
                p["default"] = kw == qd
                p["label"] = label
                points.append(p)
            for hk in ["none"] if quick else ["none", "full"]:
                p = run(jobs, setup, f"{tag} gittins history={hk}", "gittins", history_keys=hk)
                p["label"] = f"gittins history={hk}"
                points.append(p)
            ratios([srtf, las, *points], srtf["avg_jct_s"], las["avg_jct_s"])
            wins.append(
                {"start": st, "jobs": len(jobs), "srtf": srtf, "las": las, "points": points}
            )
        labels = [p["label"] for p in wins[0]["points"]]
        summary = []
        for i, label in enumerate(labels):
            rs = [w["points"][i]["vs_srtf"] for w in wins]
            summary.append(
                {
                    "label": label,
                    "default": wins[0]["points"][i].get("default", False),
                    "vs_srtf": rs,
                    "gmean_vs_srtf": round(math.exp(sum(map(math.log, rs)) / len(rs)), 3),
                }
            )
        qssf = [s for s in summary if s["label"].startswith("qssf")]
        first = min(qssf, key=lambda s: s["vs_srtf"][0])
        robust = min(qssf, key=lambda s: s["gmean_vs_srtf"])
        dq = next((s for s in qssf if s["default"]), None)
        out[trace] = {
            "nodes": nodes,
            "window_jobs": n_jobs,
            "starts": starts,
            "windows": wins,
            "summary": summary,
            "best_qssf_first_window": first["label"],
            "best_qssf_first_window_vs_srtf": first["vs_srtf"][0],
            "best_qssf_gmean": robust["label"],
            "best_qssf_gmean_vs_srtf": robust["gmean_vs_srtf"],
            "default_qssf_vs_srtf": dq["vs_srtf"] if dq else None,
            "goal_qssf_vs_srtf": 1.15,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--traces",
        default=os.environ.get("SLURM_DL_TRACES")
        or str(Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"),
    )
    ap.add_argument("--part", action="append", choices=["philly", "chronus", "chronus-gittins"])
    ap.add_argument("--quick", action="store_true", help="a few points of each grid")
    ap.add_argument("--chronus-nodes", type=int, default=16)
    ap.add_argument(
        "--chronus-jobs", type=int, default=3000, help="jobs per Chronus window (submit order)"
    )
    ap.add_argument(
        "--chronus-starts",
        default="0",
        help="where the Chronus windows start (comma-separated job positions), e.g. 0,3000,6000",
    )
    ap.add_argument("--chronus-traces", default="MIX1,SLO")
    ap.add_argument(
        "--philly-end",
        default="2017-12-01",
        help="end of the Philly window (submit times before this day; the goal is on the whole window)",
    )
    ap.add_argument(
        "--preemptive-qssf",
        action="store_true",
        help="also QSSF ranking running jobs (the engine's slow general path: long)",
    )
    a = ap.parse_args()
    parts = a.part or ["philly", "chronus"]
    T = Path(a.traces)
    t0 = time.process_time()
    out: dict = {
        "defaults": {
            "las": las_defaults(),
            "gittins": gittins_defaults(),
            "qssf": QssfConfig().model_dump(
                include={"history_keys", "min_jobs", "shrink_jobs", "use_time_limit", "preemptive"}
            ),
        },
        "machine": "shared (2 cores, other work running): wall times are noisy, CPU times less so",
    }
    if "philly" in parts:
        out["philly"] = part_philly(T, a.quick, a.preemptive_qssf, a.philly_end)
    if "chronus-gittins" in parts:
        out["chronus_gittins"] = part_chronus_gittins(
            T, a.quick, a.chronus_nodes, a.chronus_traces.split(",")
        )
    if "chronus" in parts:
        out["chronus"] = part_chronus(
            T,
            a.quick,
            a.chronus_nodes,
            a.chronus_jobs,
            [int(x) for x in a.chronus_starts.split(",")],
            a.chronus_traces.split(","),
        )
    out["cpu_s"] = round(time.process_time() - t0, 1)
    print(json.dumps(out))
    if "philly" in out:
        p = out["philly"]
        print(
            f"philly (heavy): best without durations {p['best']}: {p['best_vs_srtf']}x SRTF, "
            f"{p['best_vs_las']}x LAS 100k/3M (goal <= 1.30x SRTF)"
        )
    for trace, c in out.get("chronus", {}).items():
        print(
            f"chronus {trace} ({c['nodes']} x 8 GPUs, {c['window_jobs']} jobs from {c['starts']}): "
            f"QSSF default {c['default_qssf_vs_srtf']}x SRTF; best on the first window "
            f"{c['best_qssf_first_window']}: {c['best_qssf_first_window_vs_srtf']}x; best geometric mean "
            f"{c['best_qssf_gmean']}: {c['best_qssf_gmean_vs_srtf']}x (goal <= 1.15x)"
        )
        for srow in c["summary"]:
            print(
                f"  {srow['label']}{' (default)' if srow['default'] else ''}: "
                f"{' '.join(f'{x:.3f}' for x in srow['vs_srtf'])} gmean {srow['gmean_vs_srtf']}"
            )
    for trace, c in out.get("chronus_gittins", {}).items():
        print(
            f"chronus {trace} whole ({c['jobs']} jobs, {c['nodes']} x 8 GPUs), gittins vs SRTF: "
            + "; ".join(
                f"{p['label'].split(' ', 2)[2]}{' (default)' if p['default'] else ''} {p['vs_srtf']}x"
                for p in c["points"]
            )
        )
    print(f"cpu {out['cpu_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
