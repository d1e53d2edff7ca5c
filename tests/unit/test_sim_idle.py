"""The idle-policy what-if in the simulator: per-job verdicts from the daemon's decision code on
hand-built utilisation profiles whose answer is known, the trace transform and the two replays."""

from __future__ import annotations

import pytest

from slurm_dl.core.config import TelemetryConfig
from slurm_dl.core.idle.decide import Verdict
from slurm_dl.core.model import Job, JobClass
from slurm_dl.sim.idle_replay import apply_outcomes, counts, judge, judge_all, what_if
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.simulate import SimSetup, simulate
from slurm_dl.sim.workloads.utilisation import (
    idle_segments,
    parse_profile,
    parse_synthetic,
    synthetic_profiles,
)

H = 3600.0
CANCEL = TelemetryConfig(
    idle_util_percent=2.0, idle_minutes=60, warn_grace_minutes=30, idle_action="cancel"
)


def with_(cfg: TelemetryConfig, **kw) -> TelemetryConfig:
    return cfg.model_copy(update=kw)


def train(job_id: int = 1, gpus: int = 4, hours: float = 5.0, **kw) -> Job:
    return Job(job_id=job_id, num_gpus=gpus, duration=hours * H, **kw)


def test_idle_for_the_last_3h_of_5h_is_cancelled_after_limit_plus_grace():
    o = judge(train(gpus=4), parse_profile("0:90;7200:0"), CANCEL)
    assert o.verdict is Verdict.CANCEL and o.enforce and o.cancelled
    assert o.flagged_at == 3 * H  # idle from 2 h, warned 60 min later
    assert o.acted_at == 3.5 * H  # cancelled 30 min after the warning
    assert o.reclaimed_gpu_s == 1.5 * H * 4  # 1.5 h × 4 GPUs
    assert o.idle_gpu_s == 3 * H * 4


def test_busy_job_reclaims_nothing():
    o = judge(train(), parse_profile("85"), CANCEL)
    assert (o.verdict, o.flagged_at, o.acted_at, o.reclaimed_gpu_s, o.idle_gpu_s) == (
        Verdict.OK,
        None,
        None,
        0.0,
        0.0,
    )


def test_idle_stretch_shorter_than_the_limit_resets_when_busy_again():
    # idle 50 min, busy again, then idle for the last 100 min: only the second stretch counts
    p = parse_profile("0:90;3600:0;6600:90;9000:0")
    o = judge(Job(job_id=1, num_gpus=4, duration=9000 + 100 * 60), p, CANCEL)
    assert o.flagged_at == 9000 + 60 * 60 and o.acted_at == 9000 + 90 * 60
    assert o.reclaimed_gpu_s == 10 * 60 * 4
    assert o.idle_gpu_s == (50 + 100) * 60 * 4


def test_idle_start_between_samples_is_seen_at_the_next_sample():
    o = judge(train(gpus=1), parse_profile("0:90;7210:0"), with_(CANCEL, sample_seconds=30))
    assert o.acted_at == 7230 + 90 * 60


def test_interactive_job_uses_its_own_limit_or_is_left_alone():
    job = train(gpus=1, job_class=JobClass.INTERACTIVE)
    p = parse_profile("0:90;7200:0")
    assert judge(job, p, CANCEL).verdict is Verdict.OK  # interactive_idle_minutes unset
    o = judge(job, p, with_(CANCEL, interactive_idle_minutes=15))
    assert o.flagged_at == 7200 + 15 * 60 and o.acted_at == 7200 + 45 * 60
    # interactive jobs are not preemptible by default: the replay, like the daemon, never cancels
    # a job that did not opt in; it is deprioritized and reclaims nothing
    assert o.verdict is Verdict.DEPRIORITIZE and o.reclaimed_gpu_s == 0


def test_report_mode_flags_but_reclaims_nothing():
    outcomes = judge_all(
        [train(1), train(2)],
        [parse_profile("0:90;7200:0"), parse_profile("90")],
        with_(CANCEL, idle_action="report"),
    )
    o = outcomes[0]
    assert (
        o.verdict is Verdict.WARN
        and not o.enforce
        and o.flagged_at == 3 * H
        and o.reclaimed_gpu_s == 0
    )
    c = counts(outcomes)
    assert (c["jobs_flagged"], c["jobs_warned"], c["jobs_cancelled"], c["jobs_report_only"]) == (
        1,
        0,
        0,
        1,
    )
    assert c["reclaimed_gpu_hours"] == 0 and c["idle_gpu_hours"] == 12.0


@pytest.mark.parametrize(
    "update, verdict, enforce, warned, depri",
    [
        ({"idle_action": "warn"}, Verdict.WARN, True, 1, 0),
        ({"idle_action": "deprioritize"}, Verdict.DEPRIORITIZE, True, 1, 1),
        ({"dry_run": True}, Verdict.CANCEL, False, 0, 0),
    ],
)
def test_warn_deprioritize_and_dry_run_reclaim_nothing(update, verdict, enforce, warned, depri):
    outcomes = judge_all([train()], [parse_profile("0:90;7200:0")], with_(CANCEL, **update))
    o = outcomes[0]
    assert (o.verdict, o.enforce, o.reclaimed_gpu_s) == (verdict, enforce, 0.0)
    c = counts(outcomes)
    assert (c["jobs_flagged"], c["jobs_warned"], c["jobs_deprioritized"], c["jobs_cancelled"]) == (
        1,
        warned,
        depri,
        0,
    )
    assert apply_outcomes([train()], outcomes)[0].duration == 5 * H


def test_cancelled_job_ends_at_the_cancel_in_the_what_if_trace():
    jobs = [train(1), train(2)]
    outcomes = judge_all(jobs, [parse_profile("0:90;7200:0"), None], CANCEL)
    whatif = apply_outcomes(jobs, outcomes)
    assert whatif[0].duration == 3.5 * H and jobs[0].duration == 5 * H  # the trace stays untouched
    assert whatif[1] is jobs[1] and outcomes[1] is None


def test_what_if_replay_gives_the_other_jobs_the_reclaimed_time():
    # one GPU, FIFO: A idles after 1 h of a 10 h run and is cancelled at 2.5 h; B waits behind it
    jobs = [
        Job(job_id=1, account="x", num_gpus=1, submit_time=0, duration=10 * H),
        Job(job_id=2, account="x", num_gpus=1, submit_time=10, duration=H),
    ]
    outcomes = judge_all(jobs, [parse_profile("0:90;3600:0"), None], CANCEL)
    setup = SimSetup(gpus_per_node=1, nodes=1, fairness=False)
    factory = lambda: make_ranker("fifo")  # noqa: E731
    _, base = simulate(jobs, factory, setup)
    block = what_if(jobs, outcomes, CANCEL, factory, setup, base)
    assert block["jobs_cancelled"] == 1 and block["reclaimed_gpu_hours"] == pytest.approx(7.5)
    other = block["other_jobs"]
    assert other["jobs"] == 1
    assert other["avg_queue_s_before"] == 10 * H - 10 and other["avg_queue_s_after"] == 2.5 * H - 10
    assert other["avg_jct_s_after"] == 3.5 * H - 10
    assert block["with_idle_policy"]["makespan_s"] == 3.5 * H


def test_nothing_cancelled_means_no_change_for_the_others():
    jobs = [
        Job(job_id=1, num_gpus=1, duration=10 * H),
        Job(job_id=2, num_gpus=1, submit_time=10, duration=H),
    ]
    cfg = with_(CANCEL, idle_action="report")
    outcomes = judge_all(jobs, [parse_profile("0:90;3600:0"), None], cfg)
    setup = SimSetup(gpus_per_node=1, nodes=1, fairness=False)
    _, base = simulate(jobs, lambda: make_ranker("fifo"), setup)
    block = what_if(jobs, outcomes, cfg, lambda: make_ranker("fifo"), setup, base)
    assert block["jobs_flagged"] == 1 and block["reclaimed_gpu_hours"] == 0
    assert block["other_jobs"]["jobs"] == 2 and block["other_jobs"]["avg_jct_change"] == 0.0
    assert "with_idle_policy" not in block


def test_profiles_constants_steps_and_idle_segments():
    assert parse_profile("35") == ((0.0, 35.0),)
    assert parse_profile(" 0:85 ; 3600:0 ") == ((0.0, 85.0), (3600.0, 0.0))
    # adjacent idle steps merge; steps past the job's end are ignored
    assert idle_segments(parse_profile("0:0;100:1;200:50;300:0;900:0"), 500, 2.0) == [
        (0, 200),
        (300, 500),
    ]


@pytest.mark.parametrize(
    "text, says",
    [
        ("abc", "neither a percentage"),
        ("0:85;x:0", "not OFFSET_SECONDS:PERCENT"),
        ("10:50", "must start at offset 0"),
        ("0:50;0:20", "does not increase"),
        ("0:150", "outside 0-100"),
        ("0:50;", "not OFFSET_SECONDS:PERCENT"),
    ],
)
def test_bad_profiles_say_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=says):
        parse_profile(text)


def test_synthetic_is_deterministic_by_seed_and_honours_the_fraction():
    jobs = [train(i, gpus=1, hours=10) for i in range(400)]
    a = synthetic_profiles(jobs, 0.25, 7)
    assert a == synthetic_profiles(jobs, 0.25, 7) and a != synthetic_profiles(jobs, 0.25, 8)
    assert 60 < sum(p is not None for p in a) < 140
    assert all(p is None for p in synthetic_profiles(jobs, 0.0, 1))
    for p in filter(None, a):
        assert p[-1][1] == 0.0 and (len(p) == 1 or 0 < p[1][0] < 10 * H)
    assert parse_synthetic("0.2") == (0.2, 0) and parse_synthetic("0.2:9") == (0.2, 9)
    with pytest.raises(ValueError, match="FRACTION"):
        parse_synthetic("lots")
    with pytest.raises(ValueError, match="outside 0-1"):
        parse_synthetic("1.5")
