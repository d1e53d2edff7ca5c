"""The elastic planner, on cases worked out by hand (speeds in work units per second)."""

from __future__ import annotations

import pytest

from slurm_dl.core.config import ElasticConfig
from slurm_dl.core.elastic import ElasticJob, ElasticSettings, plan

S = ElasticSettings(resize_cost_s=150.0, min_resize_interval_s=900.0, min_gain_per_gpu=0.1)


def linear(*sizes: int) -> dict[int, float]:
    return {n: float(n) for n in sizes}


def sizes_of(decisions) -> dict[str, tuple[int, str]]:
    return {k: (d.gpus, d.reason) for k, d in decisions.items()}


def test_settings_come_from_the_config_section() -> None:
    s = ElasticSettings.of(ElasticConfig())
    assert (s.resize_cost_s, s.min_resize_interval_s, s.min_gain_per_gpu) == (150.0, 900.0, 0.1)


def test_an_elastic_job_alone_starts_at_the_largest_size_that_fits() -> None:
    # 8 GPUs, sizes 1..8 in powers of two, perfect scaling: each step gains 1 per GPU.
    j = ElasticJob("e", (1, 2, 4, 8, 16), linear(1, 2, 4, 8, 16), remaining=1000.0)
    assert sizes_of(plan([j], 8, 0.0, S)) == {"e": (8, "start")}


def test_start_small_rather_than_wait() -> None:
    # 6 GPUs, a rigid 4-GPU job first: the elastic job (2..8) starts at 2 now.
    r = ElasticJob("r", (4,), {4: 4.0}, remaining=100.0)
    e = ElasticJob("e", (2, 4, 8), linear(2, 4, 8), remaining=1000.0)
    assert sizes_of(plan([r, e], 6, 0.0, S)) == {"r": (4, "start"), "e": (2, "start")}


def test_a_waiting_rigid_job_shrinks_a_grown_elastic_job() -> None:
    # The elastic job holds all 8; a rigid 4-GPU job waits. Admission: elastic 1, rigid 4,
    # 3 left; keep: the elastic job gets the largest size <= 1 + 3 = 4.
    e = ElasticJob("e", (1, 2, 4, 8), linear(1, 2, 4, 8), 8000.0, current=8, last_resize_at=0.0)
    r = ElasticJob("r", (4,), {4: 4.0}, remaining=100.0)
    assert sizes_of(plan([e, r], 8, 10.0, S)) == {"e": (4, "shrink"), "r": (4, "start")}


def test_growth_waits_for_the_minimum_interval() -> None:
    e = ElasticJob("e", (1, 2, 4, 8), linear(1, 2, 4, 8), 4000.0, current=4, last_resize_at=0.0)
    assert sizes_of(plan([e], 8, 899.0, S)) == {"e": (4, "keep")}
    # 900 s on: at 4 GPUs 1000 s remain, at 8 500 s: 500 s saved > 150 s cost.
    assert sizes_of(plan([e], 8, 900.0, S)) == {"e": (8, "grow")}


def test_growth_must_pay_the_resize_cost() -> None:
    # 1000 units left: 250 s at 4 GPUs, 125 s at 8: saves 125 s < 150 s.
    e = ElasticJob("e", (1, 2, 4, 8), linear(1, 2, 4, 8), 1000.0, current=4, last_resize_at=0.0)
    assert sizes_of(plan([e], 8, 5000.0, S)) == {"e": (4, "keep")}
    # With 1300 units: 325 s vs 162.5 s, 162.5 s saved > 150 s.
    e2 = ElasticJob("e", e.sizes, e.speeds, 1300.0, current=4, last_resize_at=0.0)
    assert sizes_of(plan([e2], 8, 5000.0, S)) == {"e": (8, "grow")}


def test_idle_gpus_go_where_the_gain_per_gpu_is_highest() -> None:
    # 6 GPUs. A scales perfectly; B: 1.2x at 2 GPUs, 1.3x at 4. Admission A1 B1, 4 left.
    # A 1->2 gains 1/GPU (B 1->2 0.2): A2; A 2->4 gains 1/GPU: A4; 1 left: B 1->2 gains
    # 0.2 >= 0.1: B2.
    a = ElasticJob("a", (1, 2, 4), linear(1, 2, 4), 1000.0)
    b = ElasticJob("b", (1, 2, 4), {1: 1.0, 2: 1.2, 4: 1.3}, 1000.0)
    assert sizes_of(plan([b, a], 6, 0.0, S)) == {"b": (2, "start"), "a": (4, "start")}


def test_a_step_below_the_minimum_gain_is_not_taken() -> None:
    # B alone on 4 GPUs: 1->2 gains 0.05 per GPU, 1->4 (1.1 - 1) / 3 = 0.033: stays at 1.
    b = ElasticJob("b", (1, 2, 4), {1: 1.0, 2: 1.05, 4: 1.1}, 1000.0)
    assert sizes_of(plan([b], 4, 0.0, S)) == {"b": (1, "start")}


def test_a_job_that_does_not_fit_waits_and_a_smaller_one_goes_past() -> None:
    big = ElasticJob("big", (8,), {8: 8.0}, 100.0)
    small = ElasticJob("small", (2,), {2: 2.0}, 100.0)
    assert sizes_of(plan([big, small], 6, 0.0, S)) == {"big": (0, "wait"), "small": (2, "start")}


def test_higher_priority_work_preempts_a_rigid_job() -> None:
    hi = ElasticJob("hi", (4,), {4: 4.0}, 100.0)
    lo = ElasticJob("lo", (4,), {4: 4.0}, 100.0, current=4, last_resize_at=0.0)
    assert sizes_of(plan([hi, lo], 4, 60.0, S)) == {"hi": (4, "start"), "lo": (0, "preempt")}


def test_a_shrink_for_waiting_work_ignores_the_interval() -> None:
    # Resized 10 s ago, still shrunk so that the higher-priority rigid job starts.
    r = ElasticJob("r", (6,), {6: 6.0}, 100.0)
    e = ElasticJob("e", (2, 4, 8), linear(2, 4, 8), 9000.0, current=8, last_resize_at=50.0)
    assert sizes_of(plan([r, e], 8, 60.0, S)) == {"r": (6, "start"), "e": (2, "shrink")}


@pytest.mark.parametrize(
    "sizes, speeds, match",
    [
        ((4, 2), {2: 1.0, 4: 2.0}, "ascending"),
        ((0, 2), {0: 1.0, 2: 2.0}, "at least 1"),
        ((1, 2), {1: 1.0}, "no positive speed at 2"),
    ],
)
def test_bad_jobs_are_refused_with_the_reason(sizes, speeds, match) -> None:
    with pytest.raises(ValueError, match=match):
        ElasticJob("j", sizes, speeds, 1.0)
