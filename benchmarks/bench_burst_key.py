"""Does knowing a job's burst help? Heavy Philly (Oct-Nov 2017, vc_sizes_quarter.csv, each VC
its own cluster, 60 s restart cost), one run: SRTF, LAS 100k/3M, Gittins and QSSF with their
config defaults, then Gittins and QSSF whose history ladder starts with the job's batch (its
burst: :func:`slurm_dl.sim.workloads.traces.derive_batches` with each gap of ``--gaps``), and a reference
bound: Gittins whose distribution per (VC, GPU count) is the whole trace's durations (an oracle
of the distribution, not of the job; ``--no-bound`` leaves it out); ``--burst-bound`` adds, per
gap, the same with each job's whole burst first (every job of it, finished or not).

Prints one human line per point and one JSON object (average JCT, × SRTF, CPU seconds).
Usage: python benchmarks/bench_burst_key.py [--gaps 60,300] [--philly-end 2017-10-15]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from slurm_dl.core.policy import get_policy
from slurm_dl.core.policy.gittins import GittinsPolicy
from slurm_dl.core.policy.history import Finished, HistoryLearner, job_batch, with_batch
from slurm_dl.sim.ranking.ranker import PolicyRanker, load_prior, make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.workloads.traces import derive_batches, parse_time, read_cluster_sizes, read_trace

BATCH_LADDER = with_batch("full")  # the batch, then the config default's ladder


class _WholeTraceGittins(GittinsPolicy):
    """Gittins whose learnt distribution per (VC, GPU count) is fixed: every job of the trace
    (the bound; it never learns from the replay)."""

    def __init__(self, learner: HistoryLearner, **kw) -> None:
        super().__init__(history_keys="account-gpus", **kw)
        # in place before the first look-up: the index's step functions are built from the
        # learner the view holds when the policy refreshes
        self._view.learner = learner
        self._view.sync = lambda ledger, upto=None: learner


def whole_trace_learner(
    jobs, ladder="account-gpus", batch_min_jobs: int | None = None
) -> HistoryLearner:
    lr = HistoryLearner(ladder, per_key=10**7, batch_min_jobs=batch_min_jobs)
    for j in jobs:
        lr.add(
            Finished(
                j.user,
                j.account,
                j.name,
                j.num_gpus,
                j.partition,
                j.time_limit,
                j.duration * j.num_gpus,
                job_batch(j),
            )
        )
    return lr


def run(jobs, setup, label: str, make) -> dict:
    t0 = time.process_time()
    s, _ = simulate(jobs, make, setup)
    out = {
        "label": label,
        "avg_jct_s": round(s["avg_jct_s"], 1),
        "preemptions": s.get("preemptions", 0),
        "cpu_s": round(time.process_time() - t0, 2),
    }
    print(
        f"  {label}: {out['avg_jct_s']} s, {out['preemptions']} preemptions (cpu {out['cpu_s']} s)",
        file=sys.stderr,
        flush=True,
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--traces",
        default=os.environ.get("SLURM_DL_TRACES")
        or str(Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"),
    )
    ap.add_argument("--philly-end", default="2017-12-01")
    ap.add_argument("--gaps", default="60,300,600", help="burst gaps in seconds (comma-separated)")
    ap.add_argument(
        "--batch-min-jobs", default="1,3", help="finished siblings a batch needs (comma-separated)"
    )
    ap.add_argument(
        "--qssf-shrink", default="10,0", help="QSSF shrinkage with the batch key (comma-separated)"
    )
    ap.add_argument(
        "--no-baselines", action="store_true", help="leave out the default Gittins and QSSF"
    )
    ap.add_argument("--no-bound", action="store_true")
    ap.add_argument("--no-qssf", action="store_true")
    ap.add_argument(
        "--burst-bound",
        action="store_true",
        help="per gap, also Gittins whose distribution is the job's whole burst (all its "
        "jobs, finished or not), then the whole trace per VC and GPUs: how far a "
        "perfect burst key could go",
    )
    a = ap.parse_args()
    T = Path(a.traces)
    jobs = read_trace(
        T / "philly" / "philly.csv", "philly", parse_time("2017-10-01"), parse_time(a.philly_end)
    )
    setup = SimSetup(
        cluster_sizes=read_cluster_sizes(T / "philly" / "vc_sizes_quarter.csv"),
        cost=PreemptionCost(60.0),
    )
    prior = load_prior(T / "tiresias" / "yarn-gput1000.csv")

    def cfg(name, **kw):
        return lambda: PolicyRanker(get_policy(name, None, **kw), name)

    pts = [
        run(jobs, setup, "srtf", lambda: make_ranker("srtf")),
        run(jobs, setup, "las 100k/3M", lambda: make_ranker("las", las_thresholds=[1e5, 3e6])),
    ]
    if not a.no_baselines:
        pts.append(run(jobs, setup, "gittins (defaults)", cfg("gittins", prior_samples=prior)))
        if not a.no_qssf:
            pts.append(run(jobs, setup, "qssf (defaults)", cfg("qssf")))
    if not a.no_bound:
        lr = whole_trace_learner(jobs)
        pts.append(
            run(
                jobs,
                setup,
                "gittins, whole-trace distribution per VC and GPUs (bound)",
                lambda: PolicyRanker(_WholeTraceGittins(lr, prior_samples=prior), "gittins"),
            )
        )
    for gap in (float(x) for x in a.gaps.split(",")):
        n = derive_batches(jobs, gap)
        print(f"  gap {gap:g} s: {n} bursts for {len(jobs)} jobs", file=sys.stderr, flush=True)
        if a.burst_bound:
            blr = whole_trace_learner(jobs, with_batch("account-gpus"), batch_min_jobs=1)
            p = run(
                jobs,
                setup,
                f"gittins, whole burst's distribution (gap {gap:g} s; bound)",
                lambda: PolicyRanker(_WholeTraceGittins(blr, prior_samples=prior), "gittins"),
            )
            pts.append({**p, "gap_s": gap})
        for bmin in (int(x) for x in a.batch_min_jobs.split(",")):
            p = run(
                jobs,
                setup,
                f"gittins + batch (gap {gap:g} s, batch min {bmin})",
                cfg("gittins", prior_samples=prior, history_keys=BATCH_LADDER, batch_min_jobs=bmin),
            )
            pts.append({**p, "gap_s": gap, "batch_min_jobs": bmin})
            if a.no_qssf:
                continue
            for shrink in (float(x) for x in a.qssf_shrink.split(",")):
                p = run(
                    jobs,
                    setup,
                    f"qssf + batch (gap {gap:g} s, batch min {bmin}, shrink {shrink:g})",
                    cfg("qssf", history_keys=BATCH_LADDER, batch_min_jobs=bmin, shrink_jobs=shrink),
                )
                pts.append({**p, "gap_s": gap, "batch_min_jobs": bmin, "shrink_jobs": shrink})
    srtf = pts[0]["avg_jct_s"]
    for p in pts:
        p["vs_srtf"] = round(p["avg_jct_s"] / srtf, 3)
    print(json.dumps({"philly_end": a.philly_end, "points": pts}))
    for p in sorted(pts, key=lambda p: p["avg_jct_s"]):
        print(f"{p['vs_srtf']:6.3f}x  {p['avg_jct_s']:>10.1f} s  {p['label']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
