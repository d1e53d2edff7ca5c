"""Reproduces the simulator's acceptance figures. Prints one JSON object + summary lines.

Parts (``--part`` repeatable, default all):
  fidelity  fifo/sjf/srtf under the Helios semantics (per VC, helios preemption cost) at
            vc_sizes.csv and vc_sizes_quarter.csv
  quality   heavy setup (vc_sizes_quarter.csv, 60 s cost): las (tuned thresholds), gittins,
            las-tiresias (3250/7200/18000), srtf, strict fifo, fifo-backfill
  chronus   SLO and MIX1 on one shared cluster (``--chronus-nodes`` × 8 GPUs): las, deadline-las
            without admission (every deadline boosted) and with it (``--admission-share``); misses,
            best-effort JCT against LAS, and utility (strict jobs carry one step, soft ones several)
  fairness  heavy Philly as one shared cluster (Σ quarter nodes, or each of ``--fairness-nodes``),
            equal shares: fairshare (leases) beside fairshare-queue, las and srtf
  history   heavy setup: the config defaults of las, gittins (learnt history) and qssf against
            srtf and las 100k/3M; the first ``--history-chronus-jobs`` of Chronus MIX1 and SLO (user
            and model name) on ``--chronus-nodes``: qssf (defaults, queue order only, the
            previous default's settings) against srtf and las (``--history-traces`` picks; the
            full sweep: benchmarks/bench_history_sweep.py)
Usage: python benchmarks/acceptance_sim.py [--part quality] [--las-thresholds 100000,3000000]

The default LAS thresholds (100,000 / 3,000,000 GPU-s) are the best of a sweep on the heavy setup
(``slurm-dl simulate … --policy las --las-thresholds …``): fine-grained queues (30 … 300,000)
gave 42,022 s, since bursts of similar jobs then share the GPUs round-robin through the first
queues and all finish late; coarse queues keep FIFO for everything below ~28 GPU-hours and
only demote the very large jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from slurm_dl.sim.ranking.ranker import load_prior, make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.workloads.traces import parse_time, read_cluster_sizes, read_trace

KEYS = (
    "avg_jct_s",
    "median_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "makespan_s",
    "utilization",
    "preemptions",
    "preemptions_per_job",
    "deadline_miss_rate",
    "best_effort_avg_jct_s",
    "max_rho",
    "jain_rho",
    "utility_earned",
    "utility_max",
    "utility_fraction",
    "value_earned",
)


def brief(s: dict) -> dict:
    out = {k: (round(s[k], 4) if isinstance(s[k], float) else s[k]) for k in KEYS if k in s}
    rhos = {a: r for a, r in (s.get("per_account") or {}).items() if r.get("rho") is not None}
    if rhos:  # who the worst rho is: a few short jobs of a small account weigh as much as any
        a, r = max(rhos.items(), key=lambda x: x[1]["rho"])
        out["worst_rho_account"] = {
            "account": a,
            "jobs": r["jobs"],
            "avg_jct_s": round(r["avg_jct_s"], 1),
            "isolated_avg_jct_s": round(r["isolated_avg_jct_s"], 1),
        }
    return out


def run(jobs, name, setup, **kw) -> dict:
    t0 = time.process_time()
    s, _ = simulate(jobs, lambda: make_ranker(name, **kw), setup)
    out = brief(s)
    out["cpu_s"] = round(time.process_time() - t0, 2)
    print(f"  {name} {kw.get('las_thresholds') or ''}: {out}", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--traces",
        default=os.environ.get("SLURM_DL_TRACES")
        or str(Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"),
    )
    ap.add_argument(
        "--part", action="append", choices=["fidelity", "quality", "chronus", "fairness", "history"]
    )
    ap.add_argument("--las-thresholds", default="100000,3000000")
    ap.add_argument("--chronus-nodes", type=int, default=16)
    ap.add_argument("--deadline-boost", type=float, default=3600.0)
    ap.add_argument(
        "--admission-share",
        type=float,
        default=None,
        help="--part chronus: part of the cluster admitted deadlines may promise (default: the config's)",
    )
    ap.add_argument(
        "--chronus-traces", default="SLO,MIX1", help="--part chronus: which Chronus traces"
    )
    ap.add_argument(
        "--history-chronus-jobs",
        type=int,
        default=3000,
        help="--part history: the first N jobs of MIX1 and SLO (QSSF on all of it is very slow)",
    )
    ap.add_argument(
        "--history-traces",
        default="philly,mix1,slo",
        help="--part history: which of philly, mix1, slo (comma-separated)",
    )
    ap.add_argument(
        "--fairness-nodes",
        type=int,
        action="append",
        default=None,
        help="shared cluster size for --part fairness, repeatable (default: the quarter VC sizes "
        "summed, 88)",
    )
    ap.add_argument(
        "--philly-end",
        default="2017-12-01",
        help="end of the Philly window (submit times before this day; a shorter window is a quick check)",
    )
    ap.add_argument(
        "--lease",
        type=float,
        default=None,
        help="--part fairness: fairshare's lease in seconds (default: the config default)",
    )
    ap.add_argument(
        "--fairness-policies",
        default="fairshare,fairshare-queue,las,srtf",
        help="--part fairness: the policies to run (comma-separated)",
    )
    a = ap.parse_args()
    parts = a.part or ["fidelity", "quality", "chronus", "fairness", "history"]
    T = Path(a.traces)
    thr = [float(x) for x in a.las_thresholds.split(",")]
    out: dict = {"las_thresholds_gpu_s": thr}
    philly = read_trace(
        T / "philly" / "philly.csv", "philly", parse_time("2017-10-01"), parse_time(a.philly_end)
    )
    quarter = read_cluster_sizes(T / "philly" / "vc_sizes_quarter.csv")
    if "fidelity" in parts:
        fid = {}
        for sizes in ("vc_sizes.csv", "vc_sizes_quarter.csv"):
            setup = SimSetup(
                cluster_sizes=read_cluster_sizes(T / "philly" / sizes),
                cost=PreemptionCost.parse("helios"),
            )
            fid[sizes] = {p: run(philly, p, setup) for p in ("fifo", "sjf", "srtf")}
        out["fidelity"] = fid
    if "quality" in parts:
        setup = SimSetup(cluster_sizes=quarter, cost=PreemptionCost(60.0))
        prior = load_prior(T / "tiresias" / "yarn-gput1000.csv")
        q = {
            "srtf": run(philly, "srtf", setup),
            "fifo": run(philly, "fifo", setup),
            "fifo-backfill": run(philly, "fifo-backfill", setup),
            "las-tiresias": run(philly, "las-tiresias", setup),
            "las": run(philly, "las", setup, las_thresholds=thr),
            "gittins": run(philly, "gittins", setup, prior=prior),
        }
        best = min(("las", "gittins"), key=lambda k: q[k]["avg_jct_s"])
        b = q[best]["avg_jct_s"]
        q["ratios"] = {
            "best": best,
            **{
                f"vs_{k}": round(b / q[k]["avg_jct_s"], 3)
                for k in ("srtf", "fifo", "las-tiresias", "fifo-backfill")
            },
        }
        out["quality"] = q
    if "chronus" in parts:
        ch = {}
        setup = SimSetup(
            nodes=a.chronus_nodes, gpus_per_node=8, cost=PreemptionCost(60.0), fairness=False
        )
        for name in a.chronus_traces.split(","):
            jobs = read_trace(T / "chronus" / f"trace_job_Philly_{name}.csv", "chronus")
            las = run(jobs, "las", setup, las_thresholds=thr)
            dl = run(
                jobs,
                "deadline-las",
                setup,
                las_thresholds=thr,
                boost_s=a.deadline_boost,
                admission=False,
            )
            adm = run(
                jobs,
                "deadline-las",
                setup,
                las_thresholds=thr,
                boost_s=a.deadline_boost,
                admission=True,
                admission_share=a.admission_share,
            )
            r = {
                "las": las,
                "deadline-las": dl,
                "deadline-las+admission": adm,
                "nodes": a.chronus_nodes,
                "admission_share": a.admission_share,
            }
            for k in ("deadline-las", "deadline-las+admission"):
                v = r[k]
                row = {
                    "miss_rate_cut": round(
                        las["deadline_miss_rate"] / max(v["deadline_miss_rate"], 1e-9), 2
                    )
                }
                if "best_effort_avg_jct_s" in las:
                    row["best_effort_jct_ratio"] = round(
                        v["best_effort_avg_jct_s"] / las["best_effort_avg_jct_s"], 3
                    )
                r[f"{k} vs las"] = row
                print(
                    f"  {name} {k}: misses {las['deadline_miss_rate']:.2%} (las) -> {v['deadline_miss_rate']:.2%}"
                    f" = {row['miss_rate_cut']}x fewer; best-effort JCT {row.get('best_effort_jct_ratio')}x las; "
                    f"utility {v.get('utility_earned', 0):g} of {v.get('utility_max', 0):g} "
                    f"(las {las.get('utility_earned', 0):g})",
                    file=sys.stderr,
                )
            ch[name] = r
        out["chronus"] = ch
    if "fairness" in parts:
        fair = {}
        for nodes in a.fairness_nodes or [sum(quarter.values())]:
            setup = SimSetup(nodes=nodes, gpus_per_node=8, cost=PreemptionCost(60.0))
            r: dict = {"nodes": nodes}
            for p in a.fairness_policies.split(","):
                kw = {"las_thresholds": thr} if p in ("las", "fairshare") else {}
                if p == "fairshare" and a.lease is not None:
                    kw["lease_s"] = a.lease
                r[p] = run(philly, p, setup, **kw)
            if "las" in r:
                r["jct_vs_las"] = {
                    p: round(r[p]["avg_jct_s"] / r["las"]["avg_jct_s"], 3)
                    for p in r
                    if isinstance(r[p], dict) and "avg_jct_s" in r[p]
                }
            print(
                f"  fairness {nodes} nodes: "
                + "; ".join(
                    f"{p} max_rho {v['max_rho']:.2f} jct {v['avg_jct_s']:.0f} preempt/job {v['preemptions_per_job']:.3f}"
                    for p, v in r.items()
                    if isinstance(v, dict) and "max_rho" in v
                ),
                file=sys.stderr,
            )
            fair[str(nodes)] = r
        out["fairness"] = fair
    if "history" in parts:
        from slurm_dl.core.config import LasConfig
        from slurm_dl.core.policy import get_policy
        from slurm_dl.sim.ranking.ranker import PolicyRanker

        def cfg_run(jobs, name, setup, **kw):  # the config models' defaults (what an admin gets)
            t0 = time.process_time()
            s, _ = simulate(jobs, lambda: PolicyRanker(get_policy(name, None, **kw), name), setup)
            r = brief(s)
            r["cpu_s"] = round(time.process_time() - t0, 2)
            shown = {k: v for k, v in kw.items() if k != "prior_samples"}
            print(f"  {name} (defaults) {shown}: {r}", file=sys.stderr)
            return r

        d = LasConfig()
        las_d = {
            "thresholds_gpu_s": list(d.thresholds_gpu_s),
            "service": d.service,
            "starvation_factor": d.starvation_factor,
        }
        out["history"] = {}
        if "philly" in a.history_traces.split(","):
            setup = SimSetup(cluster_sizes=quarter, cost=PreemptionCost(60.0))
            prior = load_prior(T / "tiresias" / "yarn-gput1000.csv")
            h = {
                "srtf": run(philly, "srtf", setup),
                "las_100k_3M": run(philly, "las", setup, las_thresholds=[1e5, 3e6]),
                "las": cfg_run(philly, "las", setup, **las_d),
                "gittins": cfg_run(philly, "gittins", setup, prior_samples=prior),
                "gittins_no_history": cfg_run(
                    philly, "gittins", setup, prior_samples=prior, history_keys="none"
                ),
                "qssf": cfg_run(philly, "qssf", setup),
            }
            srtf, ref = h["srtf"]["avg_jct_s"], h["las_100k_3M"]["avg_jct_s"]
            h["ratios"] = {
                k: {
                    "vs_srtf": round(v["avg_jct_s"] / srtf, 3),
                    "vs_las_100k_3M": round(v["avg_jct_s"] / ref, 3),
                }
                for k, v in h.items()
                if k != "srtf"
            }
            out["history"]["philly_heavy"] = h
        chs = SimSetup(
            nodes=a.chronus_nodes, gpus_per_node=8, cost=PreemptionCost(60.0), fairness=False
        )
        # the previous default's settings: no time limit as predictor, the most specific key
        # alone, queue order only (it also learnt GPU-seconds, not run time per GPU)
        before = {"use_time_limit": False, "shrink_jobs": 0.0, "preemptive": False}
        for trace in ("MIX1", "SLO"):
            if trace.lower() not in a.history_traces.split(","):
                continue
            tj = read_trace(T / "chronus" / f"trace_job_Philly_{trace}.csv", "chronus")
            # the first jobs only: a heavily overloaded queue, long replays
            tj = sorted(tj, key=lambda j: (j.submit_time, j.job_id))[: a.history_chronus_jobs]
            m = {
                "nodes": a.chronus_nodes,
                "jobs": len(tj),
                "srtf": run(tj, "srtf", chs),
                "qssf": cfg_run(tj, "qssf", chs),
                "qssf_queue_order": cfg_run(tj, "qssf", chs, preemptive=False),
                "qssf_previous_settings": cfg_run(tj, "qssf", chs, **before),
                "las": cfg_run(tj, "las", chs, **las_d),
            }
            m["ratios"] = {
                k: round(m[k]["avg_jct_s"] / m["srtf"]["avg_jct_s"], 3)
                for k in ("qssf", "qssf_queue_order", "qssf_previous_settings", "las")
            }
            print(
                f"  history chronus {trace} first {len(tj)} jobs: x SRTF {m['ratios']}",
                file=sys.stderr,
            )
            out["history"][f"chronus_{trace.lower()}"] = m
    print(json.dumps(out))
    print("acceptance: " + "; ".join(f"{k} done" for k in parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
