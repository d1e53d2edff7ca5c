"""The what-if replays the scheduler a site deploys: the daemon's and the simulator's rankings
come from one site config and order a queue alike; without ``--config`` the replay is the
default config's, the same as a config that names only the cluster; options and the config
they describe give the same replay."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prioritizer import Prioritizer
from slurm_dl.cli.main import app
from slurm_dl.core.config import cluster_only, parse_config
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import JobState
from slurm_dl.sim.engine.state import SimJob
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.store import Store

from test_cycle import MemoryCluster

NOW = 1000.0


def _queue(c: MemoryCluster, n: int = 60, seed: int = 3) -> None:
    """Waiting jobs of three accounts with service from earlier runs (requeued jobs)."""
    rng = random.Random(seed)
    for i in range(10, 10 + n):
        executed = rng.choice((0.0, 0.0, 120.0, 4000.0, 40_000.0, 400_000.0))
        gpus = rng.choice((1, 2, 4, 8))
        c.add(
            i,
            gpus,
            account="abc"[i % 3],
            executed_s=executed,
            attained_gpu_s=executed * gpus,
            restarts=1 if executed else 0,
        )
        c.jobs[i].submit_time = NOW - rng.uniform(0, 5000)


@pytest.mark.parametrize("mix", ["combined", "las", "fairshare", "gittins"])
def test_the_daemon_and_the_simulator_order_a_queue_alike_from_one_config(tmp_path, mix):
    cfg = parse_config({**cluster_only(2, 8, "h100"), "policy": {"mix": mix}})
    usage = {"a": 50_000.0, "b": 5_000.0, "c": 0.0}
    c = MemoryCluster(nodes=2)
    c.now = NOW
    _queue(c)
    p = Prioritizer(cfg, c, Store(f"sqlite:///{tmp_path / 'p.db'}"))
    p.ledger = Ledger.from_config(cfg)
    for a, gpu_s in usage.items():
        p.ledger._charge(a, gpu_s, NOW)
    p.run_cycle()
    daemon = {int(j): e["rank"] for j, e in p.store.explanations().items()}
    daemon_order = sorted(daemon, key=daemon.get)

    r = make_ranker(mix, config=cfg, total_gpus=16)
    assert type(r.policy) is type(p.policy)
    for a, gpu_s in usage.items():
        r.ledger.charge(a, gpu_s, NOW)
    r.ctx.now = NOW
    sims = []
    for seq, job in enumerate(sorted(c.jobs.values(), key=lambda j: j.job_id)):
        sj = SimJob(seq, job)
        # as the engine leaves a job it stopped: its service so far, on the segment and the job
        sj.executed0, sj.attained0 = job.executed_s, job.attained_gpu_s
        sj.job.executed_s, sj.job.attained_gpu_s = job.executed_s, job.attained_gpu_s
        sj.job.restarts = job.restarts
        sims.append(sj)
    sim_order = [sj.job.job_id for sj in sorted(sims, key=lambda sj: r.key(sj, NOW))]
    assert all(j.state is JobState.PENDING for j in c.jobs.values())
    assert sim_order == daemon_order


def _trace(tmp_path: Path) -> Path:
    rng = random.Random(5)
    rows = ["job_id,user,account,num_gpus,submit_time,duration"]
    for i in range(1, 121):
        rows.append(
            f"{i},u{i % 5},acct{i % 3},{rng.choice((1, 2, 4, 8))},{i * 40},"
            f"{rng.choice((300, 1200, 5000, 20000))}"
        )
    p = tmp_path / "t.csv"
    p.write_text("\n".join(rows) + "\n")
    return p


def _simulate(*args: str) -> dict:
    r = CliRunner().invoke(app, ["simulate", *args, "--quiet", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _toml(tmp_path: Path, name: str, extra: str = "") -> Path:
    p = tmp_path / name
    p.write_text(
        '[[gpu_types]]\nname = "gpu"\nmemory_gb = 80\n'
        '[[node_groups]]\nname = "gpu"\nnodes = "n[1-4]"\ngpus_per_node = 8\n'
        'gpu_type = "gpu"\n' + extra
    )
    return p


POLICIES = ("--policy", "las", "--policy", "fairshare", "--policy", "combined", "--policy", "site")


def test_no_config_replays_the_default_config_as_one_that_names_only_the_cluster(tmp_path):
    trace = _trace(tmp_path)
    plain = _simulate("--trace", str(trace), "--format", "csv", "--nodes", "4", *POLICIES)
    cluster = _toml(tmp_path, "cluster.toml")
    given = _simulate("--trace", str(trace), "--format", "csv", "--config", str(cluster), *POLICIES)
    assert plain["config"] == {"path": None, "overrides": []}
    assert given["config"] == {"path": str(cluster), "overrides": []}
    assert plain["policies"] == given["policies"]
    # --policy site without --config: the default config's own mix, combined
    assert plain["policies"]["site: combined"] == plain["policies"]["combined"]


def test_options_give_the_replay_of_the_config_they_describe(tmp_path):
    trace = _trace(tmp_path)
    flags = (
        "--las-thresholds",
        "600,6000",
        "--starvation",
        "2",
        "--preempt-cost",
        "45",
        "--deadline-boost",
        "1800",
    )
    by_flags = _simulate(
        "--trace", str(trace), "--format", "csv", "--nodes", "4", *flags, *POLICIES
    )
    described = _toml(
        tmp_path,
        "described.toml",
        "[policy.las]\nthresholds_gpu_s = [600.0, 6000.0]\nstarvation_factor = 2.0\n"
        "[policy.deadline]\nboost_slack_minutes = 30.0\n"
        "[preemption]\nrestart_delay_seconds = 45.0\n",
    )
    by_file = _simulate(
        "--trace", str(trace), "--format", "csv", "--config", str(described), *POLICIES
    )
    assert by_flags["config"]["overrides"] == [
        "--las-thresholds",
        "--starvation",
        "--preempt-cost",
        "--deadline-boost",
    ]
    assert by_flags["policies"] == by_file["policies"]
    # and they differ from the defaults' (the options did something)
    plain = _simulate("--trace", str(trace), "--format", "csv", "--nodes", "4", *POLICIES)
    assert plain["policies"]["las"] != by_flags["policies"]["las"]


def test_the_header_names_the_config_and_the_options_over_it(tmp_path):
    trace = _trace(tmp_path)
    r = CliRunner().invoke(
        app,
        ["simulate", "--trace", str(trace), "--format", "csv", "--nodes", "4", "--quiet"]
        + ["--policy", "las", "--starvation", "2"],
    )
    assert r.exit_code == 0, r.output
    assert "site config: the defaults (no --config); overridden by --starvation" in r.output
