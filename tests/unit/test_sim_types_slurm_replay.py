"""Replaying a mixed-type Slurm history as Slurm ran it (``simulate --slurm-backfill --dispatch
auto`` on node groups): a backfill reservation holds the group its job waits for, not the whole
cluster, and the dispatch gaps are measured on each job's own type. Worked out by hand."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.model import Job
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.engine.fleet import NodeGroupSpec
from slurm_dl.sim.engine.overhead import dispatch_gaps, estimate_dispatch
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.engine.typed import TypeSetup

GROUPS = (NodeGroupSpec("h100", 1, 4), NodeGroupSpec("v100", 1, 4))


def job(
    i: int,
    gpu_type: str | None,
    gpus: int,
    submit: float,
    duration: float,
    start: float | None = None,
) -> Job:
    tags = {"recorded_start": repr(float(start))} if start is not None else {}
    return Job(
        i,
        account="a",
        user="a",
        num_gpus=gpus,
        submit_time=submit,
        duration=duration,
        gpu_type=gpu_type,
        tags=tags,
    )


def test_backfill_reservation_holds_only_the_group_its_job_waits_for():
    # h100: job 1 (3 GPUs) runs to 100; job 2 (4 GPUs) waits for it: reserved from 100 on h100.
    # Job 3 (1 h100 GPU, 500 s) would delay it: waits (until job 2 ends, 110); job 4 (1 h100
    # GPU, 50 s) ends before 100: backfilled at once. Jobs 5 and 6 (v100) take the idle V100s
    # at once: a reservation on the H100s holds no V100 back.
    jobs = [
        job(1, "h100", 3, 0, 100),
        job(2, "h100", 4, 1, 10),
        job(3, "h100", 1, 2, 500),
        job(4, "h100", 1, 3, 50),
        job(5, "v100", 2, 4, 500),
        job(6, "v100", 2, 5, 500),
    ]
    r = run_cluster(
        jobs,
        ClusterSpec.of_groups("c", GROUPS),
        make_ranker("fifo-backfill"),
        PreemptionCost(0.0),
        types=TypeSetup("aware", None, recorded=True),
    )
    starts = {sj.job.job_id: sj.first_start for sj in r.jobs}
    assert starts == {1: 0, 2: 100, 3: 110, 4: 3, 5: 4, 6: 5}


def test_backfill_on_one_type_keeps_its_single_reservation():
    # the queue on 8 GPUs of one type, job 1 taking 5: job 2 reserves from 100 with 4 GPUs to
    # spare then; job 3 takes one of them at once, job 4 ends before 100, job 5 takes two more
    # when job 4 is done, job 6 finds no GPU free until job 2 has run
    jobs = [
        job(1, None, 5, 0, 100),
        job(2, None, 4, 1, 10),
        job(3, None, 1, 2, 500),
        job(4, None, 1, 3, 50),
        job(5, None, 2, 4, 500),
        job(6, None, 2, 5, 500),
    ]
    r = run_cluster(jobs, ClusterSpec("c", 1, 8), make_ranker("fifo-backfill"), PreemptionCost(0.0))
    starts = {sj.job.job_id: sj.first_start for sj in r.jobs}
    assert starts == {1: 0, 2: 100, 3: 2, 4: 3, 5: 53, 6: 110}


def typed_history() -> list[Job]:
    # h100: job 1 (4 GPUs, 0-10); job 2 (2 GPUs, waiting since 1) starts at 12: 2 s after the
    # H100s came free, while the V100s stood idle all along. v100: job 3 (4 GPUs, 20-30); job 4
    # (1 GPU, waiting since 21) starts at 31: 1 s after.
    return [
        job(1, "h100", 4, 0, 10, start=0),
        job(2, "h100", 2, 1, 5, start=12),
        job(3, "v100", 4, 20, 10, start=20),
        job(4, "v100", 1, 21, 2, start=31),
    ]


def test_dispatch_gaps_are_measured_on_each_jobs_own_type():
    jobs = typed_history()
    assert dispatch_gaps(jobs, 8) == []  # counted over both types, no job ever lacked GPUs
    assert sorted(dispatch_gaps(jobs, 8, {"h100": 4, "v100": 4})) == [1.0, 2.0]
    assert estimate_dispatch(jobs, 8, 0.0, {"h100": 4, "v100": 4}).median_gap_s == pytest.approx(
        1.5
    )
    # a job without a recorded type (or of a type the cluster lacks): counted over all GPUs
    untyped = [*jobs, job(5, None, 1, 40, 1, start=40)]
    assert dispatch_gaps(untyped, 8, {"h100": 4, "v100": 4}) == []


def test_cli_dispatch_auto_on_node_groups_measures_each_type(tmp_path):
    def rec(j: Job) -> dict:
        start = float(j.tags["recorded_start"])
        return {
            "job_id": j.job_id,
            "name": "j",
            "user": "u",
            "account": "phys",
            "partition": "gpu",
            "state": {"current": "COMPLETED"},
            "time": {
                "submission": 1000 + j.submit_time,
                "start": 1000 + start,
                "end": 1000 + start + j.duration,
                "elapsed": j.duration,
                "limit": 2,
            },
            "tres": {
                "allocated": [
                    {"type": "gres", "name": "gpu", "count": j.num_gpus},
                    {"type": "gres", "name": f"gpu:{j.gpu_type}", "count": j.num_gpus},
                ]
            },
            "steps": [],
        }

    p = tmp_path / "h.json"
    p.write_text(json.dumps({"jobs": [rec(j) for j in typed_history()]}))
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(p),
            "--format",
            "sacct-json",
            "--node-types",
            "h100:1,v100:1",
            "--gpus-per-node",
            "4",
            "--policy",
            "fifo",
            "--no-fairness",
            "--dispatch",
            "auto",
            "--quiet",
            "--json",
            "--opt-in",
            "none",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["dispatch"]["starts_measured"] == 2 and doc["dispatch"][
        "median_gap_s"
    ] == pytest.approx(1.5)
