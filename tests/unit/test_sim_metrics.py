"""Metrics, fairness ρ, the JSON shape of ``slurm-dl simulate`` and determinism."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.model import Job
from slurm_dl.sim.reports.metrics import add_fairness, jain, percentile
from slurm_dl.core.policy.gittins import gittins_index
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate


def test_jain_and_percentile():
    assert jain([1.0, 1.0, 1.0]) == 1.0
    assert jain([1.0, 0.0]) == 0.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0


def test_rho_is_shared_jct_over_isolated_jct():
    s = {"per_account": {"a": {"avg_jct_s": 30.0}, "b": {"avg_jct_s": 10.0}}}
    add_fairness(s, {"a": 10.0, "b": 10.0})
    assert s["per_account"]["a"]["rho"] == 3.0 and s["per_account"]["b"]["rho"] == 1.0
    assert s["max_rho"] == 3.0
    assert s["jain_rho"] == pytest.approx(16 / 20)


def test_shared_cluster_isolated_run_uses_the_accounts_share():
    # two accounts, 2 nodes of 1 GPU; a floods the cluster, b submits one job later
    jobs = [Job(job_id=i, account="a", num_gpus=1, submit_time=0, duration=100) for i in range(4)]
    jobs.append(Job(job_id=9, account="b", num_gpus=1, submit_time=1, duration=100))
    summary, _ = simulate(jobs, lambda: make_ranker("fifo"), SimSetup(gpus_per_node=1, nodes=2))
    # shared FIFO: a's jobs end 100,100,200,200; b starts 200 → JCT 299
    assert summary["per_account"]["b"]["avg_jct_s"] == 299
    # alone on its share (1 node): b's JCT 100 → ρ 2.99; a alone on 1 node: 100,200,300,400 → 250; shared 150
    assert summary["per_account"]["b"]["rho"] == pytest.approx(2.99)
    assert summary["per_account"]["a"]["rho"] == pytest.approx(150 / 250)


def test_gittins_index_of_a_known_distribution():
    # service 1 or 10 with equal probability; at attained 0 the best quantum is Δ=1:
    # P(S ≤ 1) / E[min(S, 1)] = 0.5 / 1 = 0.5 (Δ=10: 1 / 5.5 ≈ 0.18)
    # (the simulator ranks with the policy core's index)
    w = [1.0, 1.0]
    assert max(gittins_index([1.0, 10.0], w, 0.0, d) for d in (1.0, 10.0)) == pytest.approx(0.5)
    # after 1 s of service only the long job remains: 1 / 9
    assert gittins_index([1.0, 10.0], w, 1.0, 9.0) == pytest.approx(1 / 9)


@pytest.fixture
def tiny_trace(tmp_path):
    p = tmp_path / "tiny.csv"
    rows = ["submit_time,duration,num_gpus,account"]
    for i in range(40):
        rows.append(
            f"{i * 37 % 300},{(i * 7919) % 5000 + 10},{[1, 1, 2, 4, 8, 12][i % 6]},vc{i % 3}"
        )
    p.write_text("\n".join(rows) + "\n")
    return p


def _run(args):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return r.output


def test_json_shape_and_determinism(tiny_trace):
    args = [
        "simulate",
        "--trace",
        str(tiny_trace),
        "--format",
        "csv",
        "--nodes",
        "3",
        "--gpus-per-node",
        "8",
        "--preempt-cost",
        "helios",
        "--policy",
        "fifo",
        "--policy",
        "srtf",
        "--policy",
        "las",
        "--json",
    ]
    out1 = _run(args)
    out2 = _run(args)
    assert out1 == out2
    doc = json.loads(out1)
    assert list(doc) == ["config", "policies"] and list(doc["policies"]) == ["fifo", "srtf", "las"]
    assert doc["config"] == {"path": None, "overrides": ["--preempt-cost"]}  # the defaults
    for s in doc["policies"].values():
        for key in (
            "avg_jct_s",
            "median_jct_s",
            "p99_jct_s",
            "avg_queue_s",
            "makespan_s",
            "utilization",
            "jobs",
            "preemptions",
            "per_account",
        ):
            assert key in s
        assert s["jobs"] == 40
        assert set(s["per_account"]) == {"vc0", "vc1", "vc2"}
        assert all("rho" in a for a in s["per_account"].values())
        assert 0 < s["utilization"] <= 1
    assert doc["policies"]["fifo"]["preemptions"] == 0
    assert doc["policies"]["srtf"]["avg_jct_s"] <= doc["policies"]["fifo"]["avg_jct_s"]


def test_sweep_table_and_plots(tiny_trace, tmp_path):
    out = _run(
        [
            "simulate",
            "--trace",
            str(tiny_trace),
            "--format",
            "csv",
            "--nodes",
            "3",
            "--policy",
            "las",
            "--las-thresholds",
            "100,1000",
            "--las-thresholds",
            "500,5000",
            "--plot",
            str(tmp_path / "plots"),
        ]
    )
    assert "las[100,1000]" in out and "las[500,5000]" in out
    assert (tmp_path / "plots" / "jct_cdf.png").stat().st_size > 0
    assert (tmp_path / "plots" / "queue_length.png").stat().st_size > 0


def test_errors_are_one_line(tiny_trace):
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(tiny_trace),
            "--format",
            "csv",
            "--nodes",
            "3",
            "--policy",
            "bogus",
        ],
    )
    assert r.exit_code != 0 and "unknown policy 'bogus'" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(tiny_trace),
            "--format",
            "csv",
            "--nodes",
            "1",
            "--gpus-per-node",
            "8",
        ],
    )
    assert r.exit_code != 0 and "(max 12)" in r.output


def test_per_job_rho_is_jct_over_a_1_over_n_share_of_the_cluster():
    """Themis' finish-time fairness per job: two 8-GPU jobs of 100 s at once on 8 GPUs under
    FIFO. The first runs at once while two contend (alone on half the cluster it would take
    200 s): ρ 0.5. The second waits 100 s and runs 100 s, 1.5 jobs contending on average over
    its 200 s (150 s on its share): ρ 4/3. A third, alone later, has ρ 1."""
    from slurm_dl.core.model import Job
    from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
    from slurm_dl.sim.engine.state import PreemptionCost
    from slurm_dl.sim.ranking.ranker import make_ranker
    from slurm_dl.sim.reports.metrics import job_rhos, summarize

    jobs = [
        Job(1, user="u", account="a", num_gpus=8, submit_time=0.0, duration=100.0),
        Job(2, user="u", account="a", num_gpus=8, submit_time=0.0, duration=100.0),
        Job(3, user="u", account="b", num_gpus=4, submit_time=1000.0, duration=50.0),
    ]
    r = run_cluster(jobs, ClusterSpec("c", 1, 8), make_ranker("fifo"), PreemptionCost(0.0))
    assert job_rhos([r]) == pytest.approx([0.5, 4 / 3, 1.0])
    s = summarize([r])
    assert s["job_rho_p50"] == pytest.approx(1.0)
    assert s["job_rho_max"] == pytest.approx(4 / 3)
    assert s["job_rho_p99"] == pytest.approx(1.0 + (4 / 3 - 1.0) * 0.98)
