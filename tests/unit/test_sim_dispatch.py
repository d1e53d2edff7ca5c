"""The scheduler's dispatch overheads: the engine's release delay and pass period, and their
estimate from a recorded history (worked out by hand)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.model import Job
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.engine.overhead import dispatch_gaps, estimate_dispatch, median_gap
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.engine.state import Dispatch, PreemptionCost


def job(i, gpus, submit, duration, start=None):
    tags = {"recorded_start": repr(float(start))} if start is not None else {}
    return Job(
        job_id=i,
        account="a",
        user="a",
        num_gpus=gpus,
        submit_time=submit,
        duration=duration,
        tags=tags,
    )


def starts(jobs, dispatch=None, policy="fifo", per_node=4):
    r = run_cluster(
        jobs,
        ClusterSpec("c", 1, per_node),
        make_ranker(policy),
        PreemptionCost(0.0),
        dispatch=dispatch,
    )
    return {sj.job.job_id: (sj.first_start, sj.end_time) for sj in r.jobs}


def test_no_overheads_by_default():
    jobs = [job(1, 4, 0, 10), job(2, 4, 1, 10), job(3, 4, 2, 10)]
    assert starts(jobs) == starts(jobs, Dispatch()) == {1: (0, 10), 2: (10, 20), 3: (20, 30)}


def test_release_delay_holds_gpus_after_the_end_but_not_the_end_time():
    jobs = [job(1, 4, 0, 10), job(2, 4, 1, 10), job(3, 4, 2, 10)]
    # each finished job's GPUs come back 1.5 s after it ends; its end time is unchanged
    assert starts(jobs, Dispatch(release_s=1.5)) == {1: (0, 10), 2: (11.5, 21.5), 3: (23, 33)}


def test_release_delay_keeps_other_free_gpus_usable():
    jobs = [job(1, 2, 0, 10), job(2, 2, 0, 10), job(3, 2, 5, 10), job(4, 2, 11, 1)]
    got = starts(jobs, Dispatch(release_s=3))
    assert got[3][0] == 13  # waits for job 1's GPUs, back at 10 + 3
    assert got[4][0] == 13  # job 2's GPUs are back at 13 too


def test_pass_period_starts_jobs_on_the_pass_grid_only():
    # passes at 0, 4, 8, ... from the first submission
    jobs = [job(1, 4, 0, 5), job(2, 4, 1, 5), job(3, 2, 13, 1)]
    got = starts(jobs, Dispatch(pass_s=4))
    assert got[1] == (0, 5)
    assert got[2] == (8, 13)  # free at 5: next pass at 8
    assert got[3][0] == 16  # submitted at 13 (GPUs free): next pass at 16


@pytest.mark.parametrize("policy", ["las", "gittins"])
def test_a_job_that_arrives_between_passes_starts_at_the_next_pass_under_a_preemptive_policy(
    policy,
):
    # t=10: a pass that changes nothing (the 8-GPU job cannot start beside job 1); job 3
    # arrives at 12, off the pass grid: the pass at 20 must start it although nothing but
    # the clock happened at 20
    jobs = [job(1, 4, 0, 1000), job(2, 8, 1, 10), job(3, 4, 12, 10)]
    got = starts(jobs, Dispatch(pass_s=10.0), policy=policy, per_node=8)
    assert got[1][0] == 0.0
    assert got[3][0] == 20.0


def test_release_and_pass_add_up():
    jobs = [job(1, 4, 0, 5), job(2, 4, 1, 5)]
    assert starts(jobs, Dispatch(release_s=3.5, pass_s=2))[2] == (10, 15)  # free at 8.5: pass at 10


@pytest.mark.parametrize("bad", [-1.0, float("nan"), 4000.0])
def test_dispatch_refuses_bad_values(bad):
    with pytest.raises(ValueError):
        Dispatch(release_s=bad)
    with pytest.raises(ValueError):
        Dispatch(pass_s=bad)


def test_gaps_measure_the_time_from_gpus_free_to_the_start():
    # 4 GPUs. Job 1 ends at 10; job 2 (4 GPUs, waiting since 1) starts at 12: gap 2.
    # Job 3 (2 GPUs) submitted at 30 on an idle cluster: did not wait for GPUs, no gap.
    # Job 4 (4 GPUs, waiting since 31) behind job 3 (ends 40) starts at 43: gap 3.
    jobs = [
        job(1, 4, 0, 10, start=0),
        job(2, 4, 1, 10, start=12),
        job(3, 2, 30, 10, start=30),
        job(4, 4, 31, 5, start=43),
    ]
    assert sorted(dispatch_gaps(jobs, 4)) == [2.0, 3.0]
    est = estimate_dispatch(jobs, 4)
    assert est.median_gap_s == 2.5 and est.gaps == 2
    assert est.dispatch == Dispatch(release_s=2.5)
    assert estimate_dispatch(jobs, 4, pass_s=2).dispatch == Dispatch(release_s=1.5, pass_s=2)
    assert estimate_dispatch(jobs, 4, pass_s=8).dispatch == Dispatch(release_s=0.0, pass_s=8)
    assert "median 2.5 s" in est.describe()


def test_median_of_whole_seconds_is_interpolated_within_the_second():
    # sacct keeps whole seconds: 1 s means 0.5 to 1.5 s. 3 x 0 s, 5 x 1 s, 2 x 2 s: half of
    # the 10 gaps lie below 0.5 + (5 - 3) / 5 = 0.9
    assert median_gap([0, 0, 0, 1, 1, 1, 1, 1, 2, 2]) == pytest.approx(0.9)
    assert median_gap([1.0] * 4) == pytest.approx(1.0)
    assert median_gap([0.2, 0.4, 3.1]) == pytest.approx(0.4)  # not whole seconds: the median


def test_gaps_count_only_jobs_that_waited_for_gpus():
    # two 1-GPU jobs on 4 GPUs: never short of GPUs, nothing to measure
    jobs = [job(1, 1, 0, 10, start=1), job(2, 1, 0, 10, start=3)]
    assert dispatch_gaps(jobs, 4) == []
    est = estimate_dispatch(jobs, 4)
    assert est.gaps == 0 and est.dispatch == Dispatch() and "not measurable" in est.describe()


def test_replaying_with_the_estimate_gives_back_the_recorded_starts():
    # a recorded chain on 4 GPUs where every start came 2 s after the GPUs were free
    jobs, t = [], 0.0
    for i in range(1, 6):
        jobs.append(job(i, 4, 0, 10, start=t))
        t += 12
    est = estimate_dispatch(jobs, 4)
    assert est.dispatch == Dispatch(release_s=2.0)
    got = starts(jobs, est.dispatch)
    assert [got[i][0] for i in range(1, 6)] == [float(j.tags["recorded_start"]) for j in jobs]


def _history(tmp_path):
    def rec(jid, submit, start, end):
        return {
            "job_id": jid,
            "name": "j",
            "user": "u",
            "account": "phys",
            "partition": "gpu",
            "state": {"current": "COMPLETED"},
            "time": {
                "submission": submit,
                "start": start,
                "end": end,
                "elapsed": end - start,
                "limit": 2,
            },
            "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 4}]},
            "steps": [],
        }

    p = tmp_path / "h.json"
    p.write_text(
        json.dumps(
            {"jobs": [rec(1, 1000, 1000, 1010), rec(2, 1001, 1012, 1022), rec(3, 1002, 1024, 1034)]}
        )
    )
    return p


def test_cli_dispatch_auto_reports_the_estimate(tmp_path):
    p = _history(tmp_path)
    args = [
        "simulate",
        "--trace",
        str(p),
        "--format",
        "sacct-json",
        "--nodes",
        "1",
        "--gpus-per-node",
        "4",
        "--policy",
        "fifo",
        "--no-fairness",
        "--quiet",
    ]
    r = CliRunner().invoke(app, [*args, "--dispatch", "auto", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["dispatch"] == {
        "source": "history",
        "release_s": 2.0,
        "pass_s": 0.0,
        "starts_measured": 2,
        "median_gap_s": 2.0,
        "p90_gap_s": 2.0,
    }
    plain = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert "dispatch" not in plain
    # the replay with the measured gap waits as Slurm did (0, 11, 22 s), the plain one less
    assert doc["policies"]["fifo"]["avg_queue_s"] == pytest.approx(11.0)
    assert plain["policies"]["fifo"]["avg_queue_s"] == pytest.approx(9.0)
    r = CliRunner().invoke(app, [*args, "--dispatch", "auto:2"])
    assert r.exit_code == 0 and "median 2 s" in r.output and "every 2 s" in r.output, r.output


@pytest.mark.parametrize(
    "value,msg",
    [
        ("soon", "--dispatch: got 'soon'"),
        ("-1", "--dispatch: got '-1'"),
        ("1:x", "--dispatch: got '1:x'"),
    ],
)
def test_cli_dispatch_bad_values_are_one_error_line(tmp_path, value, msg):
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(_history(tmp_path)),
            "--format",
            "sacct-json",
            "--nodes",
            "1",
            "--gpus-per-node",
            "4",
            "--dispatch",
            value,
            "--quiet",
        ],
    )
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and lines[-1].startswith("error: ") and msg in lines[-1], r.output


def test_cli_dispatch_auto_needs_a_history(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,10,1,10,a\n")
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(p),
            "--format",
            "philly",
            "--nodes",
            "1",
            "--dispatch",
            "auto",
            "--quiet",
        ],
    )
    assert r.exit_code != 0 and "needs a history" in r.output, r.output


def test_cli_slurm_backfill_places_in_the_policy_order_without_preempting(tmp_path):
    def rec(jid, submit, start, end, gpus, limit_min):
        return {
            "job_id": jid,
            "name": "j",
            "user": "u",
            "account": "phys",
            "partition": "gpu",
            "state": {"current": "COMPLETED"},
            "time": {
                "submission": submit,
                "start": start,
                "end": end,
                "elapsed": end - start,
                "limit": limit_min,
            },
            "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": gpus}]},
            "steps": [],
        }

    # 4 GPUs: job 1 (3 GPUs, 100 s, limit 10 min), job 2 (4 GPUs) behind it, job 3 (1 GPU, 10 s,
    # limit 1 min) fits in the free GPU before job 1's limit: Slurm's backfill starts it at once
    p = tmp_path / "h.json"
    p.write_text(
        json.dumps(
            {
                "jobs": [
                    rec(1, 1000, 1000, 1100, 3, 10),
                    rec(2, 1001, 1100, 1110, 4, 10),
                    rec(3, 1002, 1002, 1012, 1, 1),
                ]
            }
        )
    )
    # the shipped guards keep job 1 (100 s) from being preempted before 600 s: a site config
    # on this 1 x 4 cluster that preempts at once
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        '[[gpu_types]]\nname = "gpu"\n[[node_groups]]\nname = "gpu"\nnodes = "n1"\n'
        'gpus_per_node = 4\ngpu_type = "gpu"\n[preemption]\nmin_runtime_seconds = 0\n'
    )
    args = [
        "simulate",
        "--trace",
        str(p),
        "--format",
        "sacct-json",
        "--config",
        str(cfg),
        "--policy",
        "fifo",
        "--policy",
        "las",
        "--las-thresholds",
        "5",
        "--no-fairness",
        "--quiet",
        "--json",
        "--opt-in",
        "all",
    ]  # no filter tags in these records: without it nobody opted in to preemption
    plain = json.loads(CliRunner().invoke(app, args).stdout)
    r = CliRunner().invoke(app, [*args, "--slurm-backfill"])
    assert r.exit_code == 0, r.output
    slurm = json.loads(r.stdout)
    assert slurm["placement"] == "slurm-backfill" and "placement" not in plain
    # strict FIFO: job 3 waits behind job 2 (0, 99, 108 s); backfilled: 0, 99, 0 s
    assert plain["policies"]["fifo"]["avg_queue_s"] == pytest.approx(69.0)
    assert slurm["policies"]["fifo"]["avg_queue_s"] == pytest.approx(33.0)
    assert plain["policies"]["las"]["preemptions"] > 0  # LAS preempts job 1 past 5 GPU-s
    assert slurm["policies"]["las"]["preemptions"] == 0
