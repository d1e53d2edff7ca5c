"""explain for people: the place in the queue, contributions that add up, the step that orders
two jobs tied on every factor, preemption state in plain words, and 1-based ranks in JSON."""

from __future__ import annotations

from pathlib import Path

from slurm_dl.cli.config_file import load_config
from slurm_dl.core.explain import explain_job, waiting_reason
from slurm_dl.explain.view import explain_text, explain_view, one_line, preemption_words
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobClass, JobState
from slurm_dl.core.policy import PolicyContext, get_policy

ROOT = Path(__file__).resolve().parents[2]


def _queue(
    jobs: list[Job], now: float = 1000.0, cfg=None, led: Ledger | None = None
) -> dict[int, dict]:
    """What the prioritizer's cycle stores: one explanation per job, ranked by the policy
    (the testbed's config, an empty ledger unless given)."""
    cfg = cfg or load_config(ROOT / "site-configs" / "testbed.toml")
    policy = get_policy("combined", cfg)
    ctx = PolicyContext(
        now=now, ledger=led if led is not None else Ledger(3600.0), config=cfg, total_gpus=32
    )
    scores = policy.scores(jobs, ctx)
    order = sorted(jobs, key=lambda j: (-scores[j.job_id], j.submit_time, j.job_id))
    return {
        j.job_id: explain_job(
            j,
            ctx,
            policy,
            score=scores[j.job_id],
            site_factor=None,
            rank=r,
            ranked=len(order),
            waiting_for=waiting_reason(j, 0),
        )
        for r, j in enumerate(order)
    }


def test_two_jobs_tied_on_every_factor_show_the_ordering_step() -> None:
    a = Job(1, user="u", account="a", num_gpus=2, submit_time=100.0, state_reason="Priority")
    b = Job(2, user="u", account="a", num_gpus=2, submit_time=200.0, state_reason="Priority")
    q = _queue([b, a])
    assert [t["total"] for t in explain_view(q[1], q)["tiers"]] == [
        t["total"] for t in explain_view(q[2], q)["tiers"]
    ]
    view = explain_view(q[2], q)
    after = view["ordering"]["after"]
    assert after["job_id"] == 1 and after["step"] == "submit" and after["tied_on_every_factor"]
    assert view["queue"] == {
        "position": 2,
        "waiting": 2,
        "jobs_ahead": 1,
        "gpus_ahead": 2,
        "accounts_ahead": 1,
    }
    assert view["rank"] == 2  # 1-based, as the text says
    text = explain_text(view)
    assert "after job 1: tied on every factor; decided by submit time" in text
    assert "2nd of 2 waiting jobs" in text and all(len(line) <= 80 for line in text.splitlines())
    assert one_line(view) == "2nd of 2, 2 GPUs ahead"
    assert one_line(explain_view(q[1], q)) == "first of 2 waiting, needs 2 GPUs, 0 free"


def test_a_tier_decides_and_the_shown_contributions_add_up() -> None:
    jobs = [
        Job(
            i,
            user="u",
            account=f"acct{i % 3}",
            num_gpus=1 + i % 4,
            submit_time=float(i),
            job_class=JobClass.SERVE if i % 5 == 0 else JobClass.TRAIN,
            executed_s=float(i * 7 % 50),
            state=JobState.RUNNING if i % 4 == 0 else JobState.PENDING,
            state_reason="Resources",
        )
        for i in range(1, 60)
    ]
    q = _queue(jobs)
    for e in q.values():
        view = explain_view(e, q)
        for tier in view["tiers"]:
            assert abs(sum(p["contribution"] for p in tier["factors"]) - tier["total"]) < 1e-9
    serve = explain_view(q[5], q)  # a serving job, class weight 4 of 4: ahead of train jobs
    before = serve["ordering"].get("before")
    assert before is None or before["step"].startswith(("tier:", "tiebreak:", "submit", "job_id"))
    assert any(
        v["ordering"].get("after", {}).get("step") == "tier:class"
        for v in (explain_view(e, q) for e in q.values())
    )


def test_preemption_words_mean_what_they_say() -> None:
    running = {
        "state": "RUNNING",
        "checkpointable": True,
        "preemption": {"kind": "checkpoint", "why": "it declared a checkpoint handler"},
    }
    assert preemption_words(running, []).endswith("not signalled recently")
    assert "signalled at" in preemption_words(
        running, [{"state": "signalled", "signalled_at": 5.0, "need": 9}]
    )
    plain = {
        "state": "RUNNING",
        "checkpointable": False,
        "preemption": {"kind": "never", "why": "it declared no checkpoint handler"},
    }
    assert (
        preemption_words(plain, [])
        == "never preempted by slurm-dl: it declared no checkpoint handler"
    )
    assert "refused" in preemption_words(
        running, [{"state": "refused", "signalled_at": 5.0, "updated_at": 6.0}]
    )


def test_preemption_for_fair_share_names_the_account_it_yielded_to() -> None:
    from slurm_dl.core.fairness import LeaseSettings, plan_fair_preemptions
    from slurm_dl.core.model import JobState

    hog = [
        Job(
            100 + i,
            account="hog",
            num_gpus=8,
            state=JobState.RUNNING,
            start_time=0.0,
            executed_s=9000.0,
        )
        for i in range(4)
    ]
    move = plan_fair_preemptions(
        [Job(1, account="late", num_gpus=8)], hog, 32, 9000.0, LeaseSettings(lease_s=60.0)
    ).moves[0]
    row = {
        "state": "requeued",
        "signalled_at": 9000.0,
        "need": 1,
        "reason": move.reasons[move.victims[0]],
    }
    running = {"state": "RUNNING", "checkpointable": True, "preemption": {"kind": "checkpoint"}}
    words = preemption_words(running, [row])
    assert "for job 1 for fair share (it yielded to account late" in words
    assert "fair share" in preemption_words(running, [{**row, "state": "signalled"}])
    assert "fair share" not in preemption_words(running, [{**row, "reason": "score 0.1 < 0.9"}])


def test_levers_and_estimate() -> None:
    a = Job(1, user="u", account="a", num_gpus=8, submit_time=100.0, state_reason="Resources")
    q = _queue([a])
    view = explain_view(
        q[1],
        q,
        estimate={"at": 4600.0},
        free_gpus_per_node=[4, 2],
        now=1000.0,
    )
    assert "with 4 GPUs instead of 8" in view["levers"][0]
    assert (
        view["estimated_start"]["in_s"] == 3600.0
        and "(in 60 min)" in view["estimated_start"]["words"]
    )
    none = explain_view(q[1], q)
    assert none["estimated_start"]["at"] is None and none["estimated_start"]["words"].startswith(
        "none"
    )


def test_earliest_fit_from_running_jobs_time_limits() -> None:
    from slurm_dl.explain.view import earliest_fit

    releases = [(2, [(500.0, 4), (300.0, 2)]), (0, [(200.0, 8)])]
    assert earliest_fit(2, releases, 100.0) == 100.0  # free now on the first node
    assert earliest_fit(4, releases, 100.0) == 200.0  # the second node frees 8 at 200
    assert earliest_fit(8, releases, 100.0) == 200.0
    assert earliest_fit(16, releases, 100.0) is None


def test_factors_older_than_the_ranking_are_labelled() -> None:
    a = Job(1, user="u", account="a", num_gpus=2, submit_time=100.0, state_reason="Priority")
    q = _queue([a])
    fresh = explain_text(explain_view(q[1], q))
    assert "factors as of" not in fresh
    stale = {**q[1], "at": q[1]["at"] + 600.0}  # the numbers of a later cycle, the factors reused
    assert "factors as of" in explain_text(explain_view(stale, {1: stale}))


def test_right_after_a_requeue_the_start_is_when_its_gpus_free_up() -> None:
    """Slurm's time for a job just requeued is only when it may start (in 2 s); its GPUs are in
    use for 5 min more: explain says one start, 5 min, and says why it is not Slurm's."""
    from slurm_dl.explain.view import people_text

    a = Job(1, user="u", account="a", num_gpus=8, submit_time=100.0, state_reason="BeginTime")
    q = _queue([a])
    releases = [(0, [(1300.0, 8)]), (4, [(5000.0, 4)])]
    view = explain_view(q[1], q, estimate={"at": 1002.0}, now=1000.0, releases=releases)
    est = view["estimated_start"]
    assert est["at"] == 1300.0 and est["source"] == "time limits" and est["slurm_at"] == 1002.0
    text = people_text(view)
    assert "(in 5 min)" in text and "(in 2 s)" not in text and "may start it from" in text
    assert not any("free up on one node" in lever for lever in view["levers"])  # said once
    assert all(len(line) <= 80 for line in text.splitlines())
    later = explain_view(q[1], q, estimate={"at": 2000.0}, now=1000.0, releases=releases)
    assert later["estimated_start"]["at"] == 2000.0  # Slurm's plan, after the GPUs free
    assert later["estimated_start"]["source"] == "slurm"
    busy = {**q[1], "waiting_for": "preemption of job(s) 7 to free GPUs"}
    preempting = explain_view(busy, q, estimate={"at": 1002.0}, now=1000.0, releases=releases)
    assert preempting["estimated_start"]["at"] == 1002.0  # a preemption frees them sooner


def test_a_restarted_job_says_which_restart_and_its_checkpoint() -> None:
    from slurm_dl.explain.view import people_text, with_resume

    a = Job(1, user="u", account="a", num_gpus=2, submit_time=100.0, state_reason="Priority")
    a.restarts = 1
    q = _queue([a])
    view = explain_view(q[1], q)
    assert view["max_restarts"] == 5 and view["restart"] == "restart 1 of 5"
    told = with_resume(view, "step-000031.json")
    assert "restart 1 of 5, resumes from step-000031.json" in people_text(told)
    assert "no checkpoint yet" in with_resume(view, "")["restart"]
    assert with_resume(view, None)["restart"] == "restart 1 of 5"
    fresh = Job(2, user="u", account="a", num_gpus=2, submit_time=100.0)
    assert explain_view(_queue([fresh])[2])["restart"] is None
    a.restarts = 5
    assert "not preempted again" in explain_view(_queue([a])[1])["restart"]


def test_earliest_fit_of_a_job_on_several_nodes() -> None:
    from slurm_dl.explain.view import earliest_fit

    releases = [(0, [(300.0, 8)]), (8, []), (0, [(500.0, 8)])]
    assert earliest_fit(16, releases, 100.0, nodes=2) == 300.0  # 8 on each of two nodes
    assert earliest_fit(24, releases, 100.0, nodes=3) == 500.0
    assert earliest_fit(32, releases, 100.0, nodes=4) is None


def test_a_deadline_job_on_types_of_different_speeds_is_told_its_limit_is_not_scaled() -> None:
    from slurm_dl.explain.view import people_text

    a = Job(1, user="u", account="a", num_gpus=2, submit_time=100.0, state_reason="Priority")
    a.deadline, a.time_limit = 30000.0, 3600.0
    q = _queue([a])
    types = {
        "accepted": ["h100", "v100"],
        "speeds": {"h100": {"speed": 3.0}, "v100": {"speed": 1.0}},
    }
    text = people_text(explain_view({**q[1], "gpu_types": types}, q))
    assert "time limit: the time limit (60 min) is wall time" in text and "3.0 h on v100" in text
    assert all(len(line) <= 80 for line in text.splitlines())
    a.deadline = None
    plain = _queue([a])
    assert explain_view({**plain[1], "gpu_types": types})["time_limit_note"] is None


def test_a_promised_step_beside_slurms_start_adds_up() -> None:
    """A 60-min job promised the step at +72 min that Slurm expects to start at +52 min cannot
    make it: explain says the latest start that does, and what happens if it misses."""
    from slurm_dl.explain.view import people_text

    now = 1000.0
    a = Job(1, user="u", account="a", num_gpus=2, submit_time=100.0, state_reason="Priority")
    a.time_limit = 3600.0
    a.soft_deadlines = ((now + 72 * 60, 10.0), (now + 5 * 3600, 5.0))
    a.tags = {"deadline_soft_from": repr(now + 72 * 60)}
    q = _queue([a], now=now)
    late = explain_view(q[1], q, estimate={"at": now + 52 * 60}, now=now)["deadline_step"]
    assert "needs it to start by" in late and "misses the step" in late and "(worth 50 %)" in late
    ok = explain_view(q[1], q, estimate={"at": now + 600}, now=now)
    assert "met if it starts by" in ok["deadline_step"]
    text = people_text(ok)
    assert "met if it starts by" in text and all(len(line) <= 80 for line in text.splitlines())
