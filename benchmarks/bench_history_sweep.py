"""Sweep of the information-agnostic policies against the SRTF oracle (and LAS) on one run.

Prints one JSON object (every point: policy, settings, average JCT, ratios against SRTF and
against the reference LAS of the same run, CPU seconds) and one human line per part.

Parts (``--part`` repeatable, default both):
  philly   heavy Philly (Oct–Nov 2017, vc_sizes_quarter.csv, each VC its own cluster, 60 s
           restart cost): LAS thresholds × starvation factor × service unit, Gittins with and
           without learnt history (keys: GPU count and VC are all Philly has), QSSF.
  chronus  Chronus MIX1 and SLO (user = VC, job name = model) on one shared cluster
           (``--chronus-nodes`` × 8 GPUs, 60 s restart cost): QSSF and Gittins by history keys,
           LAS at the default thresholds.
``--preemptive-qssf`` adds QSSF that ranks running jobs too (CPU-heavy). ``--quick`` runs a few points of each grid. Each point says which settings are the config
models' defaults (``default: true``), so the defaults can be checked against the sweep.

Usage: python benchmarks/bench_history_sweep.py [--part philly] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from slurm_dl.core.config import GittinsConfig, LasConfig, QssfConfig
from slurm_dl.core.policy import get_policy
from slurm_dl.sim.ranking import PolicyRanker, load_prior
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.state import PreemptionCost
from slurm_dl.sim.traces import parse_time, read_cluster_sizes, read_trace


def run(jobs, setup, label: str, name: str, **kw) -> dict:
    t0, w0 = time.process_time(), time.time()
    s, _ = simulate(jobs, lambda: PolicyRanker(get_policy(name, None, **kw), name), setup)
    out = {"label": label, "policy": name, "settings": _plain(kw), "avg_jct_s": round(s["avg_jct_s"], 1),
           "p99_jct_s": round(s["p99_jct_s"], 1), "preemptions": s.get("preemptions", 0),
           "cpu_s": round(time.process_time() - t0, 2), "wall_s": round(time.time() - w0, 2)}
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
    return {"thresholds_gpu_s": list(d.thresholds_gpu_s), "starvation_factor": d.starvation_factor,
            "service": d.service}


def part_philly(T: Path, quick: bool, preemptive_qssf: bool) -> dict:
    philly = read_trace(T / "philly" / "philly.csv", "philly", parse_time("2017-10-01"), parse_time("2017-12-01"))
    setup = SimSetup(cluster_sizes=read_cluster_sizes(T / "philly" / "vc_sizes_quarter.csv"),
                     cost=PreemptionCost(60.0))
    prior = load_prior(T / "tiresias" / "yarn-gput1000.csv")
    srtf = run(philly, setup, "srtf", "srtf")
    ref = run(philly, setup, "las 100000,3000000 (previous tuning)", "las",
              thresholds_gpu_s=[1e5, 3e6], starvation_factor=None, service="gpu-seconds")
    dflt = las_defaults()
    points = [run(philly, setup, "las (config defaults)", "las", **dflt)]
    points[-1]["default"] = True
    keys = ["none", "account-gpus"] if quick else ["none", "account-gpus", "account", "global"]
    for hk in keys:
        for mj in ([3] if quick or hk == "none" else [3, 10, 30]):
            p = run(philly, setup, f"gittins history={hk} min_jobs={mj}", "gittins", prior_samples=prior,
                    history_keys=hk, min_jobs=mj)
            points.append(p)
    for hk in (["account-gpus"] if quick else ["account-gpus", "account"]):
        for pre in ((False, True) if preemptive_qssf else (False,)):
            points.append(run(philly, setup, f"qssf history={hk} preemptive={pre}", "qssf",
                              history_keys=hk, preemptive=pre))
    th_grid = ([[1e5, 3e6], [3e5, 1e7], [3e4, 1e6]] if quick else
               [[3e4, 1e6], [1e5, 3e6], [3e5, 1e7], [1e5, 1e6, 1e7], [3e4, 3e5, 3e6], [1e6, 1e7], [1e4, 1e5, 3e6]])
    # the starvation guard's runs cost far more CPU (many wake-ups): its grid comes last
    st_grid = [None] if quick else [None, 32.0, 8.0]
    for st in st_grid:
        for service in ("gpu-seconds", "seconds"):
            for th in th_grid:
                kw = {"thresholds_gpu_s": th, "starvation_factor": st, "service": service}
                if kw == dflt:
                    continue
                points.append(run(philly, setup, f"las {service} {','.join(f'{t:g}' for t in th)} S={st}", "las", **kw))
    ratios([srtf, ref, *points], srtf["avg_jct_s"], ref["avg_jct_s"])
    agnostic = [p for p in points]
    best = min(agnostic, key=lambda p: p["avg_jct_s"])
    return {"setup": "heavy Philly: Oct-Nov 2017, quarter VCs, 60 s restart", "jobs": len(philly),
            "srtf": srtf, "las_reference": ref, "points": points, "best": best["label"],
            "best_vs_srtf": best["vs_srtf"], "best_vs_las": best["vs_las"],
            "goal_vs_srtf": 1.30}


def part_chronus(T: Path, quick: bool, nodes: int, preemptive_qssf: bool) -> dict:
    out = {}
    setup = SimSetup(nodes=nodes, gpus_per_node=8, cost=PreemptionCost(60.0), fairness=False)
    dflt = las_defaults()
    for trace in ("MIX1", "SLO"):
        jobs = read_trace(T / "chronus" / f"trace_job_Philly_{trace}.csv", "chronus")
        srtf = run(jobs, setup, f"{trace} srtf", "srtf")
        las = run(jobs, setup, f"{trace} las (config defaults)", "las", **dflt)
        points = []
        keys = ["full", "no-limit", "user-name"] if quick else ["full", "no-limit", "user-name", "account", "global"]
        for hk in keys:
            for pre in ((False, True) if preemptive_qssf else (False,)):
                points.append(run(jobs, setup, f"{trace} qssf history={hk} preemptive={pre}", "qssf",
                                  history_keys=hk, preemptive=pre))
        for hk in (["none", "no-limit"] if quick else ["none", "full", "no-limit", "account"]):
            points.append(run(jobs, setup, f"{trace} gittins history={hk}", "gittins", history_keys=hk))
        ratios([srtf, las, *points], srtf["avg_jct_s"], las["avg_jct_s"])
        qssf = [p for p in points if p["policy"] == "qssf"]
        best_q = min(qssf, key=lambda p: p["avg_jct_s"])
        out[trace] = {"jobs": len(jobs), "nodes": nodes, "srtf": srtf, "las": las, "points": points,
                      "best_qssf": best_q["label"], "best_qssf_vs_srtf": best_q["vs_srtf"],
                      "goal_qssf_vs_srtf": 1.15}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default=os.environ.get("SLURM_DL_TRACES")
                    or str(Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"))
    ap.add_argument("--part", action="append", choices=["philly", "chronus"])
    ap.add_argument("--quick", action="store_true", help="a few points of each grid")
    ap.add_argument("--chronus-nodes", type=int, default=16)
    ap.add_argument("--preemptive-qssf", action="store_true",
                    help="also QSSF ranking running jobs (the engine's slow general path: long)")
    a = ap.parse_args()
    parts = a.part or ["philly", "chronus"]
    T = Path(a.traces)
    t0 = time.process_time()
    out: dict = {"defaults": {"las": las_defaults(), "gittins": GittinsConfig().model_dump(include={"history_keys", "min_jobs"}),
                              "qssf": QssfConfig().model_dump(include={"history_keys", "min_jobs"})},
                 "machine": "shared (2 cores, other work running): wall times are noisy, CPU times less so"}
    if "philly" in parts:
        out["philly"] = part_philly(T, a.quick, a.preemptive_qssf)
    if "chronus" in parts:
        out["chronus"] = part_chronus(T, a.quick, a.chronus_nodes, a.preemptive_qssf)
    out["cpu_s"] = round(time.process_time() - t0, 1)
    print(json.dumps(out))
    if "philly" in out:
        p = out["philly"]
        print(f"philly (heavy): best without durations {p['best']}: {p['best_vs_srtf']}x SRTF, "
              f"{p['best_vs_las']}x LAS 100k/3M (goal <= 1.30x SRTF)")
    for trace, c in out.get("chronus", {}).items():
        print(f"chronus {trace} ({c['nodes']} x 8 GPUs): best QSSF {c['best_qssf']}: "
              f"{c['best_qssf_vs_srtf']}x SRTF (goal <= 1.15x)")
    print(f"cpu {out['cpu_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
