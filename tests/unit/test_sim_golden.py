"""Per-job outcomes of small replays, pinned: a speed-up of the engine or of a policy must not
change what the simulator answers.

Two replays per policy, each with the fairness runs: a synthetic trace (always) and the first
rows of the Philly trace on a small cluster (when the shared traces are present). ``fairshare`` is the lease
policy, ``fairshare-queue`` the queue order alone (what ``fairshare`` was before leases). The goldens
were written by the code before the engine's and the policies' hot paths were optimised; each
holds, per job, (job id, first start, end, preemptions) and the summary's JCT, preemptions and
max ρ. To rewrite them after a deliberate change of behaviour, run this file with
``SLURM_DL_REGEN_GOLDEN=1`` and say why in the commit.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from slurm_dl.core.model import Job, JobClass
from slurm_dl.sim.ranking.ranker import load_prior, make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.workloads.traces import read_trace

POLICIES = ("fifo", "las", "gittins", "fairshare", "fairshare-queue", "combined", "deadline-las")
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sim"
REGEN = os.environ.get("SLURM_DL_REGEN_GOLDEN") == "1"


def synthetic_trace(n: int = 400, seed: int = 7) -> list[Job]:
    """Jobs from a few users in four accounts that repeat job names (so Gittins learns per
    key), mixed widths up to two nodes, time limits on most, deadlines on some, a few
    interactive and serving jobs (class weights)."""
    rng = random.Random(seed)
    users = [(f"u{i}", f"acct{i % 4}") for i in range(9)]
    names = ["train-bert-{}", "resnet_{}", "sweep-lr-{}", "eval"]
    widths = [1, 1, 1, 2, 2, 4, 8, 8, 16]
    jobs = []
    t = 0.0
    for i in range(1, n + 1):
        t += rng.expovariate(1 / 90.0)
        user, acct = rng.choice(users)
        dur = round(rng.lognormvariate(6.5, 1.6), 1) + 1.0
        limit = round(dur * rng.uniform(1.0, 3.0)) if rng.random() < 0.8 else None
        deadline = (
            t + limit * rng.uniform(1.2, 6.0) if limit is not None and rng.random() < 0.15 else None
        )
        cls = rng.choices(
            [JobClass.TRAIN, JobClass.INTERACTIVE, JobClass.SERVE], [0.9, 0.07, 0.03]
        )[0]
        jobs.append(
            Job(
                job_id=i,
                user=user,
                account=acct,
                name=rng.choice(names).format(rng.randint(1, 30)),
                num_gpus=rng.choice(widths),
                submit_time=round(t, 1),
                duration=dur,
                time_limit=limit,
                deadline=deadline,
                job_class=cls,
            )
        )
    return jobs


def outcome(
    jobs: list[Job], name: str, setup: SimSetup, prior: list[float] | None = None, **options
) -> dict:
    summary, results = simulate(
        jobs,
        lambda: make_ranker(
            name, prior=prior or [], total_gpus=setup.nodes * setup.gpus_per_node, **options
        ),
        setup,
    )
    per_job = sorted(
        (sj.job.job_id, sj.first_start, sj.end_time, sj.preemptions)
        for r in results
        for sj in r.jobs
    )
    return {
        "avg_jct_s": summary["avg_jct_s"],
        "preemptions": summary["preemptions"],
        "max_rho": summary.get("max_rho"),
        "jobs": [list(x) for x in per_job],
    }


def check(path: Path, got: dict) -> None:
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, separators=(",", ":")) + "\n", encoding="utf-8")
        return
    want = json.loads(path.read_text(encoding="utf-8"))
    diff = [(w, g) for w, g in zip(want["jobs"], got["jobs"]) if w != g]
    assert not diff, (
        f"{len(diff)} jobs differ from {path.name}; first: want {diff[0][0]}, got {diff[0][1]}"
    )
    assert len(want["jobs"]) == len(got["jobs"])
    assert {k: v for k, v in want.items() if k != "jobs"} == {
        k: v for k, v in got.items() if k != "jobs"
    }


@pytest.mark.parametrize("name", POLICIES)
def test_synthetic_replay_matches_golden(name):
    setup = SimSetup(gpus_per_node=8, nodes=3, cost=PreemptionCost(None), fairness=True)
    check(GOLDEN / f"synthetic-{name}.json", outcome(synthetic_trace(), name, setup))


@pytest.mark.parametrize("name", ("las", "deadline-las"))
def test_synthetic_replay_with_starvation_guard_matches_golden(name):
    setup = SimSetup(gpus_per_node=8, nodes=3, cost=PreemptionCost(None), fairness=False)
    check(
        GOLDEN / f"synthetic-{name}-starvation.json",
        outcome(synthetic_trace(), name, setup, starvation=2.0),
    )


@pytest.fixture(scope="module")
def philly_head(shared_traces) -> tuple[list[Job], list[float]]:
    jobs = read_trace(shared_traces / "philly" / "philly.csv", "philly")[:1500]
    prior_file = shared_traces / "tiresias" / "yarn-gput1000.csv"
    return jobs, load_prior(prior_file) if prior_file.is_file() else []


@pytest.mark.parametrize("name", POLICIES)
def test_philly_head_replay_matches_golden(name, philly_head):
    jobs, prior = philly_head
    setup = SimSetup(gpus_per_node=8, nodes=6, fairness=True)
    check(GOLDEN / f"philly1500-{name}.json", outcome(jobs, name, setup, prior))


@pytest.mark.parametrize("name", ("las", "gittins", "fairshare", "combined", "deadline-las"))
def test_config_without_preemption_is_replayed_without_preemptions(name):
    """``[preemption] enabled = false``: the daemon only orders the queue, so the replay stops no
    running job; the same config with preemption on does preempt on this trace."""
    from slurm_dl.cli.config_file import load_config
    from slurm_dl.sim.ranking.ranker import replay_discipline

    cfg = load_config(Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml")
    off = cfg.model_copy(
        update={"preemption": cfg.preemption.model_copy(update={"enabled": False})}
    )
    setup = SimSetup(gpus_per_node=8, nodes=3, cost=PreemptionCost(30.0), fairness=False)
    jobs = synthetic_trace(120)
    runs = {}
    for label, c in (("on", cfg), ("off", off)):
        summary, results = simulate(jobs, lambda: make_ranker(name, config=c, total_gpus=24), setup)
        runs[label] = (summary, [sj for r in results for sj in r.jobs])
    assert runs["on"][0]["preemptions"] > 0
    assert runs["off"][0]["preemptions"] == 0 and all(sj.preemptions == 0 for sj in runs["off"][1])
    assert len(runs["off"][1]) == len(jobs) and all(
        sj.end_time is not None for sj in runs["off"][1]
    )
    assert (
        replay_discipline("preemptive", off) == "backfill"
        and replay_discipline("lease", cfg) == "lease"
    )
