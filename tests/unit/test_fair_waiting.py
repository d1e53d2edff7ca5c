"""The fair-share decision's walk over waiting jobs (slurm_dl.core.waiting) leaves out only jobs
the decision would pass over: replays with it give the same schedules as with a walk that hands
the decision every waiting job in order (what the decision did before the walk)."""

from __future__ import annotations

import random

import pytest

from slurm_dl.core.model import Job
from slurm_dl.core.waiting import WaitingJobs
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.engine.state import PreemptionCost


def naive_walk(self, keep, skip=()):
    everything = sorted((e for lst in self.lists.values() for e in lst), key=lambda e: e[0])
    return (j for _, j in everything if j.job_id not in skip)


def naive_lowest(self, level, skip):
    return min(
        (level(j) for lst in self.lists.values() for _, j in lst if j.job_id not in skip),
        default=None,
    )


def jobs(seed: int, n: int = 120) -> list[Job]:
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rng.choice((0.0, 0.0, 10.0, 60.0, 300.0))
        dur = float(rng.choice((30, 300, 1200, 5000, 20000))) + rng.randint(0, 50)
        out.append(
            Job(
                job_id=i,
                user=f"u{i % 5}",
                account=f"a{rng.randint(0, 3)}",
                name="n",
                num_gpus=rng.choice((1, 1, 1, 2, 4, 8, 12, 16)),
                submit_time=t,
                duration=dur,
            )
        )
    return out


def schedule(nodes: int, seed: int, lease_s: float) -> list:
    ranker = make_ranker(
        "fairshare", total_gpus=8 * nodes, las_thresholds=[500.0, 5000.0], lease_s=lease_s
    )
    r = run_cluster(jobs(seed), ClusterSpec("c", nodes, 8), ranker, PreemptionCost(None))
    return [(sj.first_start, sj.end_time, sj.preemptions) for sj in r.jobs]


@pytest.mark.parametrize("nodes,lease_s", [(2, 300.0), (3, 600.0)])
def test_the_walk_gives_the_schedules_of_a_walk_over_every_job(monkeypatch, nodes, lease_s):
    fast = {seed: schedule(nodes, seed, lease_s) for seed in range(5)}
    monkeypatch.setattr(WaitingJobs, "walk", naive_walk)
    monkeypatch.setattr(WaitingJobs, "lowest", naive_lowest)
    slow = {seed: schedule(nodes, seed, lease_s) for seed in range(5)}
    assert fast == slow
    assert sum(p for s in fast.values() for _, _, p in s) > 0  # the decision moved GPUs


def test_walk_merges_in_key_order_and_brings_back_a_list_when_keep_turns():
    js = [
        Job(
            job_id=i,
            user="u",
            account="a",
            name="n",
            num_gpus=g,
            submit_time=float(i),
            duration=1.0,
        )
        for i, g in enumerate((1, 4, 1, 4, 1, 4))
    ]
    w = WaitingJobs.of(js, lambda j: (j.submit_time, j.job_id))
    assert [j.job_id for j in w.walk(lambda j: True)] == [0, 1, 2, 3, 4, 5]
    assert [j.job_id for j in w.walk(lambda j: True, skip={2})] == [0, 1, 3, 4, 5]
    room = [1]
    seen = []
    for j in w.walk(lambda j: j.num_gpus <= room[0]):
        seen.append(j.job_id)
        if j.job_id == 2:
            room[0] = 4  # a move freed GPUs: the 4-GPU list comes back after job 2
    assert seen == [0, 2, 3, 4, 5]
    assert w.lowest(lambda j: int(j.submit_time), {0}) == 1
