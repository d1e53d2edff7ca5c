"""Tiresias 2D-LAS: queues by attained GPU-seconds, FIFO within a queue, starvation guard."""

from __future__ import annotations

import pytest

from slurm_dl.core.config import parse_config
from slurm_dl.core.model import Job, JobState
from slurm_dl.core.policy import PolicyContext, get_policy
from slurm_dl.core.policy.las import TIRESIAS_THRESHOLDS_GPU_S

R = JobState.RUNNING


def ids(jobs):
    return [j.job_id for j in jobs]


def las(**kw):
    """2D-LAS (GPU-seconds, as Tiresias; the default config's LAS counts run time)."""
    kw.setdefault("service", "gpu-seconds")
    return get_policy("las", thresholds_gpu_s=[100.0, 1000.0], starvation_factor=None, **kw)


def test_queue_boundaries():
    p = las()
    assert [p.queue_of(a) for a in (0, 99.9, 100, 999, 1000, 1e9)] == [0, 0, 1, 1, 2, 2]


def test_job_crossing_a_threshold_drops_a_queue():
    p = las()
    ctx = PolicyContext(now=0.0)
    old = Job(1, num_gpus=2, submit_time=0.0, attained_gpu_s=90.0, executed_s=45.0, state=R)
    young = Job(2, num_gpus=1, submit_time=10.0)
    assert ids(p.order([young, old], ctx)) == [1, 2]  # both in queue 0: FIFO by submit
    # 2 GPUs x 5 s more = 100 GPU-s: the running job crosses the first threshold at t=5.
    assert p.next_key_change(old, ctx) == pytest.approx(5.0)
    old.attained_gpu_s, old.executed_s = 100.0, 50.0
    ctx5 = PolicyContext(now=5.0)
    assert p.queue(old, ctx5) == 1
    assert ids(p.order([old, young], ctx5)) == [2, 1]
    # Next change: at 1000 GPU-s, 450 s later.
    assert p.next_key_change(old, ctx5) == pytest.approx(455.0)
    old.attained_gpu_s = 2000.0
    assert p.next_key_change(old, ctx5) is None  # last queue


def test_gpu_count_matters_two_dimensional():
    p = las()
    ctx = PolicyContext(now=0.0)
    wide = Job(1, num_gpus=8, attained_gpu_s=8 * 20.0, executed_s=20.0, submit_time=0)
    narrow = Job(2, num_gpus=1, attained_gpu_s=50.0, executed_s=50.0, submit_time=1)
    assert ids(p.order([wide, narrow], ctx)) == [2, 1]


def test_starvation_guard_promotes_to_top_queue():
    p = get_policy(
        "las", thresholds_gpu_s=[100.0, 1000.0], starvation_factor=2.0, service="gpu-seconds"
    )
    # Ran 100 s on one GPU (queue 1), submitted at 0. At now=t it has waited t - 100.
    starving = Job(1, num_gpus=1, submit_time=0.0, attained_gpu_s=100.0, executed_s=100.0)
    fresh = Job(2, num_gpus=1, submit_time=250.0)
    ctx = PolicyContext(now=250.0)  # waited 150 <= 2 x 100: not promoted
    assert p.queue(starving, ctx) == 1
    assert ids(p.order([starving, fresh], ctx)) == [2, 1]
    assert p.next_key_change(starving, ctx) == pytest.approx(300.0)  # waited reaches 200 at t=300
    ctx2 = PolicyContext(now=301.0)
    assert p.promoted(starving, 301.0) and p.queue(starving, ctx2) == 0
    # queue 0, but after the job that is in queue 0 on its own (Tiresias appends it at promotion)
    assert ids(p.order([starving, fresh], ctx2)) == [2, 1]
    assert ids(
        p.order([starving, Job(3, num_gpus=1, submit_time=0.0, attained_gpu_s=500.0)], ctx2)
    ) == [1, 3]
    assert p.queue_for(100.0, 100.0, 201.0) == 0 and p.queue_for(100.0, 100.0, 150.0) == 1
    assert p.queue_for(100.0, 100.0, 150.0, running=True) == 0  # hysteresis band: S/2 while running
    # Once running it stays promoted (hysteresis) until executed reaches waited / (S/2) = 201:
    # it runs another 101 s, not 0.5 s, before the next pass may preempt it again.
    starving.state = R
    assert p.queue(starving, ctx2) == 0
    assert p.next_key_change(starving, ctx2) == pytest.approx(301.0 + 201.0 - 100.0)
    later = PolicyContext(now=301.0 + 101.5)
    starving.executed_s = 201.5
    assert not p.promoted(starving, later.now) and p.queue(starving, later) == 1


def test_tiresias_defaults_and_config_thresholds():
    p = get_policy("las-tiresias")
    assert p.thresholds == TIRESIAS_THRESHOLDS_GPU_S == (3250.0, 7200.0, 18000.0)
    cfg = parse_config(
        {
            "gpu_types": [{"name": "h100"}],
            "node_groups": [
                {"name": "g", "nodes": "n[1-2]", "gpus_per_node": 8, "gpu_type": "h100"}
            ],
            "policy": {"las": {"thresholds_gpu_s": [10.0, 20.0], "starvation_factor": 3.0}},
        }
    )
    p2 = get_policy("las", cfg)
    assert p2.thresholds == (10.0, 20.0) and p2.starvation_factor == 3.0
    assert get_policy("las-tiresias", cfg).thresholds == TIRESIAS_THRESHOLDS_GPU_S
    assert get_policy("las", cfg, thresholds_gpu_s=[5.0]).thresholds == (5.0,)


def test_bad_thresholds_rejected():
    with pytest.raises(ValueError, match="increasing"):
        get_policy("las", thresholds_gpu_s=[10.0, 5.0])


def test_las_is_preemptive_and_scores_by_queue():
    p = las()
    assert p.preemptive and p.discipline == "preemptive" and not p.oracle
    ctx = PolicyContext(now=0.0)
    assert p.score(Job(1, attained_gpu_s=0), ctx) == 1.0
    assert p.score(Job(1, attained_gpu_s=500), ctx) == 0.5
    assert p.score(Job(1, attained_gpu_s=5000), ctx) == 0.0


def test_by_run_time_a_split_job_ranks_like_the_whole():
    # one 8-GPU job vs its eight 1-GPU pieces, all having run 1,000 s
    whole = Job(1, num_gpus=8, attained_gpu_s=8000.0, executed_s=1000.0)
    piece = Job(2, num_gpus=1, attained_gpu_s=1000.0, executed_s=1000.0)
    ctx = PolicyContext(now=5000.0)
    two_d = get_policy("las", thresholds_gpu_s=[2000.0, 20000.0], service="gpu-seconds")
    assert two_d.queue(piece, ctx) < two_d.queue(whole, ctx)  # 2D-LAS rewards splitting
    by_time = get_policy("las", thresholds_gpu_s=[2000.0, 20000.0], service="seconds")
    assert by_time.queue(piece, ctx) == by_time.queue(whole, ctx) == 0
    whole.state = R
    # a running job crosses a run-time threshold after the same seconds whatever its width
    assert by_time.next_key_change(whole, ctx) == pytest.approx(5000.0 + 1000.0)
    assert two_d.next_key_change(whole, ctx) == pytest.approx(5000.0 + (20000.0 - 8000.0) / 8)


def test_the_site_config_ranks_by_run_time_unless_it_asks_for_2d():
    # no site config: the default config's LAS (run time), as a site that sets nothing gets
    assert get_policy("las").service == "seconds"
    assert get_policy("las").thresholds == (30000.0, 300000.0, 3000000.0)
    assert get_policy("las-tiresias").service == "gpu-seconds"
    cfg = parse_config(
        {
            "gpu_types": [{"name": "h100"}],
            "node_groups": [{"name": "g", "nodes": "n1", "gpus_per_node": 8, "gpu_type": "h100"}],
        }
    )
    assert get_policy("las", cfg).service == "seconds"
    assert get_policy("las-tiresias", cfg).service == "gpu-seconds"
    with pytest.raises(ValueError, match="service"):
        get_policy("las", service="gpus")
