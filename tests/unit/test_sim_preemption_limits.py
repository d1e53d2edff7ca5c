"""A replay with a site config preempts only what the prioritizer could: never a job that has
run less than ``[preemption] min_runtime_seconds`` in its current run, never one restarted
``max_restarts`` times. Without those rules a small-threshold config (the testbed's LAS
thresholds of 20/600/3600 s) preempted the same jobs over and over, and ``combined`` never
ended on this trace."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from slurm_dl.cli.config_file import load_config
from slurm_dl.sim.engine.loop import ClusterSpec, run_cluster
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.engine.state import PreemptionCost

from test_sim_golden import synthetic_trace

CONFIG = Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml"


class RecordingCost(PreemptionCost):
    """The engine's preemption cost, noting how long each victim had run in its current run
    (``lost_work`` is called once per preemption with that time)."""

    def lost_work(self, run_seconds: float) -> float:
        RAN.append(run_seconds)
        return super().lost_work(run_seconds)


RAN: list[float] = []


@pytest.mark.parametrize("name", ("las", "gittins", "combined", "deadline-las", "fairshare"))
def test_replay_obeys_min_runtime_and_max_restarts(name):
    cfg = load_config(CONFIG)
    pc = cfg.preemption
    assert pc.enabled and pc.min_runtime_seconds == 15 and pc.max_restarts == 5
    setup = SimSetup(gpus_per_node=8, nodes=3, cost=RecordingCost(30.0), fairness=False)
    jobs = synthetic_trace(180)
    RAN.clear()

    def hang(*_):
        raise AssertionError("the replay did not finish within 120 s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(120)
    try:
        summary, results = simulate(
            jobs, lambda: make_ranker(name, config=cfg, total_gpus=24), setup
        )
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    sims = [sj for r in results for sj in r.jobs]
    assert len(sims) == len(jobs) and all(sj.end_time is not None for sj in sims)
    assert summary["preemptions"] == sum(sj.preemptions for sj in sims) == len(RAN)
    assert summary["preemptions"] > 0
    assert max(sj.preemptions for sj in sims) <= pc.max_restarts
    assert min(RAN) >= pc.min_runtime_seconds - 1e-6


@pytest.mark.parametrize("name", ("combined", "las"))
def test_reference_and_fast_paths_obey_the_limits(name):
    """The per-account queues and cached keys (fast) and the plain passes (reference) both
    keep the rules (their schedules differ slightly anyway: usage is charged differently)."""
    cfg = load_config(CONFIG)
    jobs = synthetic_trace(150)
    spec = ClusterSpec("c", 3, 8)
    for fast in (True, False):
        RAN.clear()
        r = run_cluster(
            jobs, spec, make_ranker(name, config=cfg, total_gpus=24), RecordingCost(30.0), fast=fast
        )
        assert max(sj.preemptions for sj in r.jobs) <= cfg.preemption.max_restarts
        assert not RAN or min(RAN) >= cfg.preemption.min_runtime_seconds - 1e-6
        assert all(sj.end_time is not None for sj in r.jobs) and r.preemptions == len(RAN) > 0


def test_lease_shorter_than_the_minimum_run_time_waits_for_it():
    """The lease decision takes a victim only after its lease; a lease shorter than the
    minimum run time is stretched to it (the restart cap the decision applies itself)."""
    cfg = load_config(CONFIG)
    cfg = cfg.model_copy(
        update={
            "policy": cfg.policy.model_copy(
                update={"fairshare": cfg.policy.fairshare.model_copy(update={"lease_seconds": 0.0})}
            ),
            "preemption": cfg.preemption.model_copy(
                update={"min_runtime_seconds": 120.0, "max_restarts": 2}
            ),
        }
    )
    RAN.clear()
    r = run_cluster(
        synthetic_trace(150),
        ClusterSpec("c", 3, 8),
        make_ranker("fairshare", config=cfg, total_gpus=24),
        RecordingCost(30.0),
    )
    assert r.preemptions == len(RAN) > 0
    assert min(RAN) >= 120.0 - 1e-6 and max(sj.preemptions for sj in r.jobs) <= 2


def test_a_replay_placed_by_backfill_has_no_pins():
    """``simulate --slurm-backfill`` sets the discipline after the ranker is made: the pins (and
    their wake-ups at the end of each minimum run) go, so the replay equals the policy's own
    non-preemptive order placed by backfill."""
    from slurm_dl.core.policy import get_policy
    from slurm_dl.sim.ranking.ranker import PolicyRanker

    cfg = load_config(Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml")
    setup = SimSetup(gpus_per_node=8, nodes=3, cost=PreemptionCost(30.0), fairness=False)
    jobs = synthetic_trace(150)

    def cli():
        r = make_ranker(cfg.policy.mix, config=cfg, total_gpus=24)
        r.discipline = "backfill"
        return r

    def queue_order():
        r = PolicyRanker(get_policy(cfg.policy.mix, cfg, preemptive=False), cfg.policy.mix, cfg, 24)
        r.discipline = "backfill"
        return r

    assert cli()._pin is None
    runs = []
    for factory in (cli, queue_order):
        summary, results = simulate(jobs, factory, setup)
        runs.append(
            sorted((sj.job.job_id, sj.first_start, sj.end_time) for r in results for sj in r.jobs)
        )
        assert summary["preemptions"] == 0
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", ("las", "gittins", "combined", "deadline-las", "fairshare"))
@pytest.mark.parametrize("with_config", (False, True))
def test_jobs_that_did_not_opt_in_are_never_victims(name, with_config):
    """The prioritizer never preempts a job that did not opt in (no ``dl:ckpt``): neither may a
    replay of it, with or without a site config, on the fast and the reference path."""
    cfg = load_config(CONFIG) if with_config else None
    jobs = synthetic_trace(150)
    for j in jobs[::2]:
        j.checkpointable = False
    legacy = {j.job_id for j in jobs[::2]}
    for fast in (True, False):
        r = run_cluster(
            jobs,
            ClusterSpec("c", 3, 8),
            make_ranker(name, config=cfg, total_gpus=24),
            PreemptionCost(30.0),
            fast=fast,
        )
        assert all(sj.end_time is not None for sj in r.jobs)
        hit = [sj.job.job_id for sj in r.jobs if sj.preemptions]
        assert hit, "the trace must make the policy preempt at all"
        assert not legacy & set(hit), (
            f"{name}: preempted jobs that did not opt in: {sorted(legacy & set(hit))[:5]}"
        )
