"""QSSF, fair share, deadline (EDF, boost, admission), class weights and the combined policy."""

from __future__ import annotations

import pytest

from slurm_dl.core.config import parse_config
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobClass, JobState
from slurm_dl.core.policy import PolicyContext, get_policy
from slurm_dl.core.policy.deadline import deadline_feasible, slack

H = 3600.0


def ids(jobs):
    return [j.job_id for j in jobs]


def cfg(**policy):
    return parse_config(
        {
            "gpu_types": [{"name": "h100"}],
            "node_groups": [
                {"name": "g", "nodes": "n[1-4]", "gpus_per_node": 8, "gpu_type": "h100"}
            ],
            "policy": policy,
        }
    )


# --- QSSF -------------------------------------------------------------------------------
def test_qssf_predicts_from_user_name_then_user_then_account():
    led = Ledger(H)
    led.add_history(100.0, "ann", "bert", "nlp")
    led.add_history(300.0, "ann", "bert", "nlp")
    led.add_history(50_000.0, "ann", "gpt", "nlp")
    led.add_history(10.0, "bob", "resnet", "vision")
    p = get_policy(
        "qssf", default_gpu_s=7.0, history_keys="user-name", min_jobs=1, shrink_jobs=0.0
    )  # Helios
    ctx = PolicyContext(now=0.0, ledger=led)
    assert p.predict(Job(1, user="ann", name="bert", account="nlp"), ctx) == 200.0  # user+name
    ann_mean = (100.0 + 300.0 + 50_000.0) / 3
    assert p.predict(Job(2, user="ann", name="new", account="nlp"), ctx) == pytest.approx(
        ann_mean
    )  # user
    assert p.predict(Job(3, user="cat", name="x", account="vision"), ctx) == 10.0  # account
    assert p.predict(Job(4, user="dan", name="x", account="bio"), ctx) == 7.0  # default
    jobs = [
        Job(1, user="ann", name="bert", account="nlp"),
        Job(2, user="ann", name="new", account="nlp"),
        Job(3, user="cat", name="x", account="vision"),
        Job(4, user="dan", name="x", account="bio"),
    ]
    assert ids(p.order(jobs, ctx)) == [4, 3, 1, 2]
    led.add_history(1_000_000.0, "bob", "resnet", "vision")  # the cache follows the ledger
    assert p.predict(Job(3, user="cat", name="x", account="vision"), ctx) == pytest.approx(
        500_005.0
    )
    assert p.preemptive and not get_policy("qssf", preemptive=False).preemptive


# --- fair share -------------------------------------------------------------------------
def test_fairshare_orders_accounts_below_their_share_first():
    led = Ledger(H)
    led.observe(
        [
            Job(1, account="a", num_gpus=1, state=JobState.RUNNING),
            Job(2, account="b", num_gpus=3, state=JobState.RUNNING),
        ],
        now=0.0,
    )
    led.observe(
        [
            Job(1, account="a", num_gpus=1, state=JobState.RUNNING),
            Job(2, account="b", num_gpus=3, state=JobState.RUNNING),
        ],
        now=100.0,
    )
    # usage: a 100, b 300 (a: 1/4, b: 3/4 of all usage)
    p = get_policy("fairshare-queue", shares={"a": 1.0, "b": 1.0, "c": 2.0})
    ctx = PolicyContext(now=100.0, ledger=led)
    # shares: a 1/4, b 1/4, c 1/2 -> F(a) = 2^-(0.25/0.25) = 0.5, F(b) = 2^-3, F(c) = 1
    assert p.factor("a", ctx) == pytest.approx(0.5)
    assert p.factor("b", ctx) == pytest.approx(0.125)
    assert p.factor("c", ctx) == 1.0
    jobs = [
        Job(10, account="b", submit_time=0),
        Job(11, account="a", submit_time=1),
        Job(12, account="c", submit_time=2),
    ]
    assert ids(p.order(jobs, ctx)) == [12, 11, 10]
    # a bigger share for b flips a and b: shares a 1, b 6, c 2 -> F(b) = 2^-(0.75/(6/9)) ~ 0.46 > F(a) = 2^-(2.25)
    p2 = get_policy("fairshare-queue", shares={"a": 1.0, "b": 6.0, "c": 2.0})
    assert ids(p2.order(jobs, ctx)) == [12, 10, 11]


def test_fairshare_forgets_with_the_half_life():
    led = Ledger(H)
    led.observe([Job(1, account="a", num_gpus=1, state=JobState.RUNNING)], now=0.0)
    led.observe(
        [
            Job(1, account="a", num_gpus=1, state=JobState.RUNNING),
            Job(2, account="b", num_gpus=1, state=JobState.RUNNING),
        ],
        now=1000.0,
    )
    led.observe(
        [
            Job(1, account="a", num_gpus=1, state=JobState.COMPLETED),
            Job(2, account="b", num_gpus=1, state=JobState.RUNNING),
        ],
        now=1000.0,
    )
    led.observe(
        [Job(2, account="b", num_gpus=1, state=JobState.RUNNING)],
        now=1000.0 + 10 * H,
    )
    assert led.usage("a", 1000.0) == pytest.approx(1000.0)
    p = get_policy("fairshare-queue")
    # after ten half-lives a's old usage is ~0.1% of b's recent usage: a ranks first
    ctx = PolicyContext(now=1000.0 + 10 * H, ledger=led)
    assert p.factor("a", ctx) > 0.99 and p.factor("b", ctx) < 0.26


# --- deadline ---------------------------------------------------------------------------
def test_edf_among_deadline_jobs_and_boost_by_slack():
    p = get_policy("deadline", boost_slack_s=600.0)
    now = 1000.0
    ctx = PolicyContext(now=now)
    late = Job(1, submit_time=0, deadline=now + 5000, time_limit=1000)  # slack 4000
    soon = Job(2, submit_time=1, deadline=now + 3000, time_limit=1000)  # slack 2000
    tight = Job(3, submit_time=2, deadline=now + 4000, time_limit=3500)  # slack 500: boosted
    plain = Job(4, submit_time=-5)
    hopeless = Job(5, submit_time=-9, deadline=now + 100, time_limit=1000)  # slack -900
    tight_later = Job(
        6, submit_time=-20, deadline=now + 4500, time_limit=4000
    )  # slack 500: boosted
    assert slack(tight, now) == 500.0 and slack(plain, now) is None
    # boosted first, EDF among them; then everyone with time to spare, FIFO; hopeless last
    assert ids(p.order([late, soon, tight, plain, hopeless, tight_later], ctx)) == [
        3,
        6,
        4,
        1,
        2,
        5,
    ]
    assert p.score(tight, ctx) == 1.0 and p.score(soon, ctx) == 0.5 and p.score(plain, ctx) == 0.5
    assert p.score(hopeless, ctx) == 0.0
    # the score is piecewise constant: the same level a second later, so keys can be cached
    assert p.key(tight, PolicyContext(now=now + 1.0)) == p.key(tight, ctx)
    # soon is boosted when its slack falls below 600, 1400 s from now
    assert p.next_key_change(soon, ctx) == pytest.approx(now + 1400.0)


def test_running_job_slack_uses_what_is_left_of_its_limit():
    j = Job(1, deadline=2000.0, time_limit=1000.0, start_time=900.0, state=JobState.RUNNING)
    assert slack(j, 1000.0) == (2000.0 - 1000.0) - 900.0


def test_a_requeued_checkpointable_job_needs_only_what_it_has_not_executed():
    ran_600 = dict(deadline=5000.0, time_limit=1000.0, executed_s=600.0)
    assert slack(Job(1, **ran_600), 1000.0) == 4000.0 - 400.0
    # a job that restarts from scratch needs its whole limit again
    assert slack(Job(2, checkpointable=False, **ran_600), 1000.0) == 4000.0 - 1000.0


def test_deadline_admission():
    c = cfg(deadline={"max_deadline_days": 1.0, "max_deadline_jobs_per_user": 2})
    now = 10_000.0
    ok, why = deadline_feasible(Job(1, deadline=now + 7200, time_limit=3600), now, c)
    assert ok and "slack" in why
    ok, why = deadline_feasible(Job(1, deadline=now + 1800, time_limit=3600), now, c)
    assert not ok and "runs past the deadline" in why
    ok, why = deadline_feasible(Job(1, deadline=now - 1, time_limit=60), now, c)
    assert not ok and "past" in why
    ok, why = deadline_feasible(Job(1, deadline=now + 3 * 86400, time_limit=60), now, c)
    assert not ok and "at most 1 days" in why
    ok, why = deadline_feasible(Job(1, deadline=now + 7200), now, c)
    assert not ok and "time limit" in why
    ok, why = deadline_feasible(
        Job(1, deadline=now + 7200, time_limit=60), now, c, user_deadline_jobs=2
    )
    assert not ok and "allows 2" in why
    assert deadline_feasible(Job(1), now, c) == (True, "no deadline")


# --- class ------------------------------------------------------------------------------
def test_class_weights_put_serving_and_interactive_first():
    p = get_policy("class")
    ctx = PolicyContext(now=0.0)
    jobs = [
        Job(1, job_class=JobClass.TRAIN, submit_time=0),
        Job(2, job_class=JobClass.INTERACTIVE, submit_time=1),
        Job(3, job_class=JobClass.SERVE, submit_time=2),
        Job(4, job_class=JobClass.SWEEP, submit_time=-1),
    ]
    assert ids(p.order(jobs, ctx)) == [3, 2, 4, 1]
    assert get_policy("class", weights={"train": 10.0}).order(jobs, ctx)[0].job_id == 1


# --- combined ---------------------------------------------------------------------------
def test_combined_tiers_are_lexicographic_and_weights_sum_within_a_tier():
    c = cfg(
        las={"thresholds_gpu_s": [100.0, 1000.0], "service": "gpu-seconds"},
        combined={
            "tiers": [["deadline"], ["class"], ["las", "fairshare"]],
            "weights": {"las": 1.0, "fairshare": 0.5},
        },
    )
    p = get_policy("combined", c)
    assert p.preemptive and p.discipline == "preemptive"
    led = Ledger(H)
    led.observe([Job(99, account="hog", num_gpus=8, state=JobState.RUNNING)], now=0.0)
    led.observe([Job(99, account="hog", num_gpus=8, state=JobState.RUNNING)], now=100.0)
    now = 100.0
    ctx = PolicyContext(now=now, ledger=led)
    dl = Job(1, submit_time=50, deadline=now + 1000, time_limit=900, attained_gpu_s=5000)  # boosted
    serve = Job(2, submit_time=40, job_class=JobClass.SERVE, attained_gpu_s=5000)
    fresh_hog = Job(3, submit_time=10, account="hog")  # LAS 1.0 + 0.5 x F(hog)=0.5*2^-1
    used_fair = Job(4, submit_time=20, account="quiet", attained_gpu_s=500)  # LAS 0.5 + 0.5 x 1
    fresh_fair = Job(5, submit_time=30, account="quiet")  # LAS 1.0 + 0.5
    order = ids(p.order([fresh_hog, used_fair, fresh_fair, serve, dl], ctx))
    assert order == [1, 2, 5, 3, 4]
    assert p.tier_scores(fresh_fair, ctx) == pytest.approx([0.5, 0.25, 1.5])
    # a boosted deadline's key changes when it becomes hopeless (slack 100 s -> 0)
    assert p.next_key_change(dl, ctx) == pytest.approx(now + 100.0, abs=1e-3)


def test_combined_without_las_is_not_preemptive_and_rejects_unknown_components():
    assert not get_policy("combined", tiers=[["class"], ["fairshare"]]).preemptive
    with pytest.raises(ValueError, match="unknown component"):
        get_policy("combined", tiers=[["nope"]])
    with pytest.raises(ValueError, match="more than one tier"):
        get_policy("combined", tiers=[["las"], ["las"]])


def test_the_prioritizer_honours_only_deadlines_within_the_quota():
    from slurm_dl.core.policy.deadline import admit_deadlines

    c = cfg(deadline={"max_deadline_days": 1.0, "max_deadline_jobs_per_user": 2})
    jobs = [
        Job(i, user="ann", submit_time=float(i), deadline=5000.0, time_limit=600.0)
        for i in range(1, 5)
    ]
    jobs += [
        Job(10, user="bob", submit_time=0.0, deadline=3 * 86400.0, time_limit=600.0),  # too far off
        Job(11, user="bob", submit_time=0.0, deadline=5000.0),  # no limit
        Job(12, user="bob", submit_time=0.0, deadline=5000.0, time_limit=600.0),
        Job(13, user="bob"),
    ]
    ignored = admit_deadlines(jobs, c)
    # ann's two earliest keep theirs, her 3rd and 4th wait without one; bob's far and unlimited ones are ignored
    assert sorted(ignored) == [3, 4, 10, 11]
    assert (
        "already has 2 deadline jobs" in ignored[3]
        and "at most 1" in ignored[10]
        and "time limit" in ignored[11]
    )
    # when one of ann's first two ends, her third gets its deadline back
    assert sorted(admit_deadlines(jobs[1:], c)) == [4, 10, 11]


@pytest.mark.parametrize(
    "tiers",
    [
        [["deadline"], ["class"], ["las", "fairshare"]],
        [["las", "deadline"], ["fairshare"]],
        [["fairshare", "las"]],
    ],
)
def test_combined_key_from_fused_score_and_tiebreak_equals_the_separate_calls(tiers):
    """LAS and deadline give score and tiebreak from one look at the job: the combined key is
    the same tuple, float for float, as calling each separately."""
    import random

    from slurm_dl.core.policy.combined import CombinedPolicy

    rng = random.Random(3)
    c = cfg(
        mix="combined",
        las={"starvation_factor": 4.0},
        combined={"tiers": tiers, "weights": {"fairshare": 0.3}},
    )
    led = Ledger(H)
    now = 100 * H
    jobs = []
    for i in range(300):
        running = rng.random() < 0.3
        j = Job(
            i + 1,
            user=f"u{i % 7}",
            account=f"a{i % 5}",
            num_gpus=rng.choice((1, 2, 8)),
            submit_time=now - rng.uniform(0, 50 * H),
            time_limit=rng.choice((H, 10 * H)),
            state=JobState.RUNNING if running else JobState.PENDING,
            start_time=now - H if running else None,
            executed_s=rng.choice((0.0, rng.uniform(0, 5 * H))),
            attained_gpu_s=rng.uniform(0, 1e6),
            deadline=now + rng.uniform(-H, 20 * H) if rng.random() < 0.3 else None,
            job_class=rng.choice(list(JobClass)),
        )
        jobs.append(j)
    led.observe(jobs, now - 60.0)
    led.observe(jobs, now)
    ctx = PolicyContext(now=now, ledger=led, config=c, total_gpus=32)
    fused = get_policy("combined", c)
    assert any(f for t in fused._tiers for f in [t[1]])  # some tier is fused
    plain = CombinedPolicy(c)
    for comp in plain.components.values():
        comp.score_and_tiebreak = lambda: None  # instance attribute: no fused call
    plain._compile()
    assert not any(t[1] for t in plain._tiers)
    assert [fused.key(j, ctx) for j in jobs] == [plain.key(j, ctx) for j in jobs]


@pytest.mark.parametrize(
    "tiers",
    [
        [["deadline"], ["class"], ["las", "fairshare"]],
        [["las", "deadline"], ["fairshare"]],
        [["fairshare", "las"]],
        [["class", "fairshare"], ["deadline", "las"]],
    ],
)
@pytest.mark.parametrize("starvation", [None, 4.0])
@pytest.mark.parametrize("fused", [True, False])
def test_combined_bound_key_equals_the_key_of_each_job(tiers, starvation, fused):
    """The key the combined policy sorts a queue with (each component bound to the cycle's
    context once, the loop unrolled into one generated function) is the same tuple, float for
    float (the sign of a zero included), as ``key`` per job, and so the order; with each
    component's score and tiebreak in one call or, where none has one, in two."""
    import random

    from slurm_dl.core.policy.combined import CombinedPolicy

    rng = random.Random(5)
    c = cfg(
        mix="combined",
        las={"starvation_factor": starvation},
        combined={"tiers": tiers, "weights": {"fairshare": 0.3, "class": 0.7}},
    )
    led = Ledger(H)
    now = 100 * H
    jobs = []
    for i in range(400):
        running = rng.random() < 0.3
        soft = (
            ((now + rng.uniform(0, 30 * H), 1.0), (now + 40 * H, 0.5)) if rng.random() < 0.1 else ()
        )
        j = Job(
            i + 1,
            user=f"u{i % 7}",
            account=f"a{i % 5}",
            num_gpus=rng.choice((1, 2, 8)),
            submit_time=now - rng.uniform(0, 50 * H),
            time_limit=rng.choice((H, 10 * H)),
            state=JobState.RUNNING if running else JobState.PENDING,
            start_time=now - H if running else None,
            executed_s=rng.choice((0.0, rng.uniform(0, 5 * H))),
            attained_gpu_s=rng.uniform(0, 1e6),
            deadline=now + rng.uniform(-H, 20 * H) if rng.random() < 0.3 and not soft else None,
            soft_deadlines=soft,
            job_class=rng.choice(list(JobClass)),
            state_reason="JobHeldUser" if not running and rng.random() < 0.05 else None,
        )
        jobs.append(j)
    led.observe(jobs, now - 60.0)
    led.observe(jobs, now)
    ctx = PolicyContext(now=now, ledger=led, config=c, total_gpus=32)
    policy = get_policy("combined", c)
    assert isinstance(policy, CombinedPolicy)
    if not fused:
        for comp in policy.components.values():
            comp.score_and_tiebreak = lambda: None  # instance attribute: no fused call
            comp.bind_score_and_tiebreak = lambda ctx: None
        policy._compile()
        assert not any(t[1] for t in policy._tiers)
    bound = policy.bound_key(ctx)
    assert [bound(j) for j in jobs] == [policy.key(j, ctx) for j in jobs]
    assert [repr(bound(j)) for j in jobs] == [
        repr(policy.key(j, ctx)) for j in jobs
    ]  # -0.0 is not 0.0
    assert [j.job_id for j in policy.order(jobs, ctx)] == [
        j.job_id for j in sorted(jobs, key=lambda j: policy.key(j, ctx))
    ]
