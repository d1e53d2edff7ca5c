"""The queue-length series of the report and the plots never goes below zero: a job that
starts in the second it was submitted is counted after its submission."""

from __future__ import annotations

from slurm_dl.core.model import Job
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.reports.metrics import queue_series
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.engine.state import PreemptionCost


def test_same_second_starts_never_go_below_zero():
    # five jobs submitted at t=100 on an empty cluster: each starts at once, in that second
    jobs = [
        Job(
            job_id=i,
            user="u",
            account="a",
            num_gpus=1,
            submit_time=100.0 + (i >= 5) * 50,
            duration=600.0,
        )
        for i in range(8)
    ]
    r = run_cluster(jobs, ClusterSpec("c", 1, 6), make_ranker("fifo"), PreemptionCost())
    assert sorted(r.queue_deltas)[0][1] == -1  # the raw deltas sorted by time alone dip first
    times, counts = queue_series([r])
    assert min(counts) >= 0 and counts[-1] == 0
    assert times == sorted(times) and len(set(times)) == len(times)
    assert max(counts) == 2  # 150: three more jobs, one GPU free: two wait until 700
