"""The replay keeps the prioritizer's ``[preemption] hysteresis``: a waiting job takes a running
job's GPUs only when its score beats the victim's by the margin, the scores being ranks over the
waiting and running jobs (as the daemon's ``rank_scores``).

Each pass of every preemptive path (one queue, sorted, ranked, per account, several GPU types)
is checked against the rule itself: before the pass, every job is ranked by the keys the pass
reads;
after it, each job the pass preempted must rank at least ``hysteresis × (n − 1)`` places below
the best waiting job (a bound for the best job chosen)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.policy.base import rank_scores
from slurm_dl.core.model import Job, JobState
from slurm_dl.sim.engine.fleet import NodeGroupSpec
from slurm_dl.sim.engine.loop import ClusterSpec, Engine, run_cluster
from slurm_dl.sim.engine.state import PreemptionCost
from slurm_dl.sim.engine.typed import TypeSetup
from slurm_dl.sim.ranking.ranker import make_ranker

sys.path.insert(0, str(Path(__file__).parent))
from test_sim_fast_paths import CONFIGS, random_jobs  # noqa: E402


def config(hysteresis: float):
    cfg = load_config(CONFIGS / "university-small.toml")
    pre = cfg.preemption.model_copy(
        update={"hysteresis": hysteresis, "min_runtime_seconds": 0.0, "max_restarts": 50}
    )
    return cfg.model_copy(update={"preemption": pre})


def waiting(eng: Engine) -> list:
    if eng.grouped:
        return [sj for _, js in eng.gp.values() for sj in js]
    return list(eng.pending)


def pass_keys(eng: Engine, now: float, jobs: list) -> dict:
    """Each job's key as the engine's pass reads it (the keys it keeps where it keeps them: a
    key read afresh a rounding error before its wake-up may already have moved)."""
    if eng.grouped:
        hk = eng.ranker.head_keyer(now)
        return {sj.seq: hk(sj) for sj in jobs}
    kept = dict(zip((sj.seq for sj in eng.pending), eng.pending_keys)) if eng.sorted_pending else {}
    running_kept = eng.ranked_run or (eng.cached_running and not eng.sorted_pending)
    keys = {}
    for sj in jobs:
        if sj.running:
            keys[sj.seq] = sj.static_key if running_kept else eng.ranker.key(sj, now)
        else:
            keys[sj.seq] = kept[sj.seq] if sj.seq in kept else eng.ranker.key(sj, now)
    return keys


@pytest.fixture
def checked(monkeypatch):
    """Replays whose every pass is checked against the hysteresis; yields the checks made."""
    seen = {"passes": 0, "victims": 0}
    schedule = Engine.schedule

    def checked_schedule(self, now, done, same):
        h = self.ranker.hysteresis
        jobs = waiting(self) + list(self.running)
        before = {sj.seq: sj.preemptions for sj in self.running}
        keys = pass_keys(self, now, jobs)
        order = sorted(jobs, key=lambda sj: keys[sj.seq])
        place = {sj.seq: i for i, sj in enumerate(order)}
        moves = self.moves
        schedule(self, now, done, same)
        if self.moves != moves:
            return  # a type move (fair share on several types) is no preemption
        victims = [sj for sj in jobs if sj.seq in before and sj.preemptions > before[sj.seq]]
        if not victims:
            return
        seen["passes"] += 1
        best = min(place[sj.seq] for sj in jobs if sj.seq not in before)
        n = len(jobs)
        for sj in victims:
            seen["victims"] += 1
            gap = place[sj.seq] - best
            assert gap >= (h - 1e-12) * (n - 1) and (gap > 0 or not seen.get("strict")), (
                f"t={now}: job {sj.job.job_id} at place {place[sj.seq]} of {n} preempted for a "
                f"waiting job at place {best} (hysteresis {h})"
            )

    monkeypatch.setattr(Engine, "schedule", checked_schedule)
    return seen


def flat(name: str, h: float, seed: int, fast: bool = True):
    ranker = make_ranker(name, config=config(h), total_gpus=16)
    return run_cluster(
        random_jobs(seed), ClusterSpec("c", 2, 8), ranker, PreemptionCost(None), fast=fast
    )


@pytest.mark.parametrize("name", ["combined", "las", "deadline-las", "gittins"])
@pytest.mark.parametrize("fast", [True, False])
def test_every_preemption_beats_its_victim_by_the_hysteresis(checked, name, fast):
    for seed in range(3):
        result = flat(name, 0.3, seed, fast)
        assert all(sj.end_time is not None for sj in result.jobs if sj.job.num_gpus)
    assert checked["victims"] > 0  # the rule was met, not left untested


def typed_run(h: float, seed: int):
    groups = (NodeGroupSpec("fast", 2, 8, "a"), NodeGroupSpec("slow", 2, 8, "b"))
    ranker = make_ranker("las", config=config(h), total_gpus=32)
    return run_cluster(
        random_jobs(seed),
        ClusterSpec.of_groups("c", groups),
        ranker,
        PreemptionCost(None),
        types=TypeSetup(choice="aware"),
    )


def test_several_gpu_types_keep_the_hysteresis_too(checked):
    for seed in range(3):
        typed_run(0.3, seed)
    assert checked["victims"] > 0


@pytest.mark.parametrize("name", ["combined", "las"])
def test_a_wider_margin_preempts_less(name):
    counts = [sum(flat(name, h, seed).preemptions for seed in range(4)) for h in (0.0, 0.3, 0.9)]
    assert counts[0] > counts[1] > counts[2], counts


@pytest.mark.parametrize("name", ["combined", "las"])
def test_a_margin_of_zero_still_preempts_only_for_a_better_job(checked, name):
    """Hysteresis 0 drops the margin, not the rule: as in the daemon, a victim still ranks
    strictly below the waiting job it yields to."""
    checked["strict"] = True
    for seed in range(3):
        flat(name, 0.0, seed)
    assert checked["victims"] > 0


def test_the_margin_is_the_daemons_on_rank_scores():
    """The places the replay counts are the daemon's scores: ``rank_scores`` spaces n jobs by
    1/(n − 1), so a margin of h is h × (n − 1) places."""
    jobs = [
        Job(job_id=i, user="u", account="a", num_gpus=1, submit_time=float(i), duration=1.0)
        for i in range(11)
    ]
    for j in jobs:
        j.state = JobState.PENDING
    s = rank_scores(jobs)
    assert s[0] - s[1] == pytest.approx(0.1)
    assert s[0] - s[3] >= 0.3 - 1e-12 > s[0] - s[2]
