"""The engine's fast preemptive passes on random traces, pinned to the schedules of the code
before them (goldens written by it; ``SLURM_DL_REGEN_GOLDEN=1`` rewrites them).

The fast passes keep running jobs sorted (LAS, Gittins) or per account (combined, fair share)
and decide a pass from the waiting jobs and the lowest-ranked running jobs only. Random widths
from 0 up to the cluster's size and bursts of jobs at one instant make the edge cases (a job
that does not fit, a running job skipped, the cluster filled exactly) common.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.model import Job, JobClass
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.engine.state import PreemptionCost

CONFIGS = Path(__file__).resolve().parents[2] / "site-configs"
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sim"
REGEN = os.environ.get("SLURM_DL_REGEN_GOLDEN") == "1"


def random_jobs(seed: int, n: int = 120) -> list[Job]:
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rng.choice((0.0, 0.0, 5.0, 30.0, 120.0))  # bursts: several jobs at one instant
        dur = float(rng.choice((10, 60, 300, 900, 4000))) + rng.randint(0, 50)
        deadline = t + dur * rng.uniform(1.0, 4.0) if rng.random() < 0.15 else None
        out.append(
            Job(
                job_id=i,
                user=f"u{i % 7}",
                account=f"a{rng.randint(0, 4)}",
                name=f"n{i % 3}",
                num_gpus=rng.choice((0, 1, 1, 1, 2, 3, 4, 8, 12, 16)),
                submit_time=t,
                duration=dur,
                time_limit=dur * 2,
                deadline=deadline,
                job_class=JobClass.INTERACTIVE if rng.random() < 0.05 else JobClass.TRAIN,
            )
        )
    return out


def schedule(result) -> list[list]:
    return [[sj.first_start, sj.end_time, sj.preemptions] for sj in result.jobs]


CASES = [
    ("combined", None),
    ("combined", "university-small.toml"),
    ("fairshare-queue", None),
    ("las", None),
    ("deadline-las", None),
    ("fairshare", None),
    ("fairshare", "university-small.toml"),
]


def replay(seed: int, name: str, cfg_name: str | None) -> list[list]:
    cfg = load_config(CONFIGS / cfg_name) if cfg_name else None
    kw = {"prior": [50.0, 500.0, 5000.0, 20000.0]} if name == "gittins" else {}
    if name in ("las", "deadline-las") and cfg is None:
        kw = {"las_thresholds": [200.0, 2000.0]}
    ranker = make_ranker(name, config=cfg, total_gpus=16, **kw)
    return schedule(
        run_cluster(random_jobs(seed), ClusterSpec("c", 2, 8), ranker, PreemptionCost(None))
    )


@pytest.mark.parametrize("name,cfg_name", CASES)
def test_fast_passes_keep_the_schedules_of_the_code_before_them(name, cfg_name):
    label = f"{name}-{cfg_name or 'default'}"
    got = {str(seed): replay(seed, name, cfg_name) for seed in range(6)}
    path = GOLDEN / f"random-{label}.json"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, separators=(",", ":")) + "\n", encoding="utf-8")
        return
    want = json.loads(path.read_text(encoding="utf-8"))
    for seed in want:
        assert got[seed] == want[seed], f"seed {seed}: the schedule changed"
    assert any(p for sched in got.values() for _, _, p in sched) or name == "fairshare-queue"


def test_gittins_with_a_prior_off_the_grid_finishes(monkeypatch):
    """Attained service a hair below a bin edge (floating point) once woke the job again and
    again, a few nanoseconds apart, forever: the replay never ended."""
    import signal

    def hang(*_):
        raise AssertionError("the replay did not finish within 60 s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    try:
        result = replay(0, "gittins", None)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert len(result) == 120 and all(
        end is None or end >= start for start, end, _ in result if start is not None
    )


@pytest.mark.parametrize("name", ["las", "gittins", "deadline-las"])
@pytest.mark.parametrize("pass_s", [0.0, 7.0])
def test_passes_left_out_after_key_changes_alone_change_no_schedule(name, pass_s):
    """The fast path passes over event times at which only running jobs' keys changed, each
    staying where it falls among the waiting jobs; the reference path passes at every event."""
    from slurm_dl.sim.engine.state import Dispatch

    kw = (
        {"prior": [50.0, 500.0, 5000.0, 20000.0]}
        if name == "gittins"
        else {"las_thresholds": [200.0, 2000.0]}
    )
    for seed in range(4):
        runs = [
            run_cluster(
                random_jobs(seed),
                ClusterSpec("c", 2, 8),
                make_ranker(name, total_gpus=16, **kw),
                PreemptionCost(None),
                fast=fast,
                dispatch=Dispatch(pass_s=pass_s),
            )
            for fast in (True, False)
        ]
        assert schedule(runs[0]) == schedule(runs[1]), f"seed {seed}"
        assert runs[0].preemptions == runs[1].preemptions
