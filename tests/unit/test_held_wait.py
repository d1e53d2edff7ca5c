"""A held job's time is not waiting: the ledger counts a job's wait only while it is pending, not
held and past its eligible time, and LAS's starvation guard never promotes a job held now.

What Slurm reports (22.05, seen on the testbed; 24.11 and 26.05 do the same in their source):
a held job is pending with reason JobHeldUser (``--hold``, ``scontrol uhold``) or JobHeldAdmin
(``scontrol hold`` by root, ``requeuehold``) and eligible time 0; at release the reason clears and
the next scheduling pass sets the eligible time to the release time. A requeue sets the submit
time to the requeue time and the eligible time ``cred_expire + 1`` s later.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from prioritizer import Prioritizer
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobState
from slurm_dl.core.policy.base import PolicyContext
from slurm_dl.core.policy.las import LasPolicy
from slurm_dl.store import Store
from test_cycle import MemoryCluster

ROOT = Path(__file__).resolve().parents[2]
P, R = JobState.PENDING, JobState.RUNNING
H = 3600.0


def job(state=P, *, reason="", eligible=None, submit=0.0, **kw) -> Job:
    return Job(
        1,
        user="ann",
        account="nlp",
        num_gpus=1,
        state=state,
        state_reason=reason,
        submit_time=submit,
        eligible_time=eligible,
        **kw,
    )


def held(reason="JobHeldUser", **kw) -> Job:
    return job(reason=reason, **kw)


def seen(led: Ledger, *pairs: tuple[float, Job]) -> float | None:
    for now, j in pairs:
        led.observe([j], now=now)
    return led.waited(1)


# --- the ledger's count -------------------------------------------------------------------


def test_a_waiting_job_counts_from_its_submission_and_every_second_after():
    assert (
        seen(
            Ledger(H), (30.0, job(eligible=0.5, submit=0.5)), (90.0, job(eligible=0.5, submit=0.5))
        )
        == 89.5
    )


def test_held_from_submission_counts_nothing_until_released_then_from_the_release():
    led = Ledger(H)
    assert seen(led, (10.0, held()), (500.0, held())) == 0.0  # sbatch --hold, 500 s
    assert (
        seen(led, (501.0, job(reason=""))) == 0.0
    )  # released; Slurm has not set the eligible time yet
    assert seen(led, (520.0, job(reason="Priority", eligible=502.0))) == 18.0  # from the release


def test_time_held_between_two_waits_is_left_out():
    led = Ledger(H)
    seen(led, (0.0, job(eligible=0.0)), (100.0, job(eligible=0.0)))
    assert (
        seen(led, (150.0, held(reason="JobHeldAdmin")), (900.0, held(reason="JobHeldAdmin")))
        == 100.0
    )
    assert seen(led, (1000.0, job(eligible=950.0))) == 150.0  # released at 950


def test_a_hold_and_release_between_two_snapshots_counts_only_from_the_release():
    led = Ledger(H)
    seen(led, (0.0, job(eligible=0.0)), (10.0, job(eligible=0.0)))
    assert seen(led, (400.0, job(eligible=395.0))) == 15.0  # held at 11, released at 395


def test_a_job_held_since_it_was_last_seen_counts_nothing_even_if_its_eligible_time_is_old():
    # requeuehold keeps an eligible time still ahead; should a release keep an old one, the
    # interval the job was held in is not counted
    led = Ledger(H)
    seen(
        led,
        (0.0, held(reason="JobHeldAdmin", eligible=5.0)),
        (100.0, held(reason="JobHeldAdmin", eligible=5.0)),
    )
    assert seen(led, (200.0, job(eligible=5.0))) == 0.0
    assert seen(led, (230.0, job(eligible=5.0))) == 30.0


def test_a_requeued_job_waits_from_its_eligible_time_not_while_it_ran():
    led = Ledger(H)
    seen(led, (0.0, job(eligible=0.0)), (20.0, job(eligible=0.0)))  # waited 20 s, then ran
    led.observe([job(R)], now=21.0)
    led.observe([job(R)], now=80.0)
    # requeued at 85: Slurm moves the submit time there, eligible at 96 (cred_expire + 1)
    assert seen(led, (90.0, job(submit=85.0, eligible=96.0, reason="BeginTime"))) == 20.0
    assert seen(led, (100.0, job(submit=85.0, eligible=96.0))) == 24.0
    assert led.jobs[1].executed_s == pytest.approx(69.0)


def test_dependencies_and_begin_times_ahead_are_not_waiting():
    led = Ledger(H)
    assert seen(led, (0.0, job(reason="Dependency")), (50.0, job(reason="Dependency"))) == 0.0
    assert seen(led, (60.0, job(reason="BeginTime", eligible=70.0))) == 0.0
    assert seen(led, (80.0, job(eligible=70.0))) == 10.0


def test_the_count_survives_a_round_trip_and_an_older_ledger_starts_counting():
    led = Ledger(H)
    seen(led, (0.0, job(eligible=0.0)), (40.0, job(eligible=0.0)))
    again = Ledger.from_dict(led.to_dict())
    assert again.waited(1) == 40.0 and again.jobs[1].waiting
    old = led.to_dict()
    for r in old["jobs"]:  # a ledger saved before waits were counted
        del r["waited_before_s"], r["wait_from"]
    older = Ledger.from_dict(old)
    assert older.waited(1) is None
    assert seen(older, (100.0, job(eligible=10.0))) == 90.0  # counted as at first sight


def test_a_ledger_that_kept_the_wait_as_a_sum_counts_on_from_it():
    """Saved by a release that added each cycle's wait to ``waited_s`` (with ``waiting``)."""
    led = Ledger(H)
    seen(led, (0.0, job(eligible=0.0)), (40.0, job(eligible=0.0)))
    summed = led.to_dict()
    for r in summed["jobs"]:
        r["waited_s"], r["waiting"] = 40.0, True
        del r["waited_before_s"], r["wait_from"]
    back = Ledger.from_dict(summed)
    assert back.waited(1) == 40.0 and back.jobs[1].waiting
    assert seen(back, (70.0, job(eligible=0.0))) == 70.0
    rows = led.to_dict(compact=True)
    names = [n for n in rows["job_fields"] if n not in ("waited_before_s", "wait_from")] + [
        "waited_s",
        "waiting",
    ]
    rows["jobs"] = [
        [v for n, v in zip(rows["job_fields"], r) if n not in ("waited_before_s", "wait_from")]
        + [40.0, False]
        for r in rows["jobs"]
    ]
    rows["job_fields"] = names
    stopped = Ledger.from_dict(rows)  # not waiting when saved: its 40 s stay, nothing counts on
    assert stopped.waited(1) == 40.0 and not stopped.jobs[1].waiting


# --- the guard ----------------------------------------------------------------------------


def las() -> LasPolicy:
    return LasPolicy(thresholds_gpu_s=[20.0, 600.0], starvation_factor=10.0, service="seconds")


def test_a_held_job_is_never_promoted_however_long_it_has_waited():
    p = las()
    ctx = PolicyContext(now=10_000.0)
    for reason in ("JobHeldUser", "JobHeldAdmin"):
        j = held(reason=reason, executed_s=30.0, attained_gpu_s=30.0, waited_s=5000.0)
        assert not p.promoted(j, ctx.now) and p.queue(j, ctx) == 1
        assert p.next_key_change(j, ctx) is None
    released = job(executed_s=30.0, attained_gpu_s=30.0, waited_s=5000.0)
    assert p.promoted(released, ctx.now) and p.queue(released, ctx) == 0


def test_the_counted_wait_replaces_the_submit_time_and_without_it_nothing_changes():
    p = las()
    j = job(submit=0.0, executed_s=30.0, attained_gpu_s=30.0)
    assert p.promoted(j, 400.0)  # the simulator's count: 400 - 0 - 30 = 370 > 300
    assert p.next_key_change(dataclasses.replace(j), PolicyContext(now=100.0)) == pytest.approx(
        330.0
    )
    j.waited_s = 290.0  # the ledger's count: held for a while
    assert not p.promoted(j, 400.0)
    assert p.next_key_change(j, PolicyContext(now=400.0)) == pytest.approx(410.0)
    j.waited_s = 301.0
    assert p.promoted(j, 400.0)


# --- the prioritizer's cycle --------------------------------------------------------------


def test_a_job_held_by_its_owner_gains_no_promotion_from_the_hold(tmp_path):
    """A preempted job (30 s run, testbed config: S = 10, so 300 s of waiting promote it) is held
    by its owner for 400 s: not promoted while held, nor at release; promoted once it has waited
    300 s after the release."""
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    assert config.policy.las.starvation_factor == 10.0
    c = MemoryCluster(nodes=1)
    c.add(1, 1, running_on="gpu01")
    p = Prioritizer(config, c, Store(f"sqlite:///{tmp_path / 'prio.db'}"))
    p.run_cycle()
    c.now += 30
    c.requeue(1)
    j = c.jobs[1]
    j.submit_time, j.eligible_time = c.now, c.now  # Slurm moves both to the requeue
    p.run_cycle()
    j.state_reason, j.eligible_time = "JobHeldUser", None  # scontrol uhold

    def promoted() -> bool:
        return p.store.explanation(1)["factors"]["las"]["starvation_promoted"]

    for _ in range(8):
        c.now += 50
        p.run_cycle()
        assert not promoted()
    c.now += 10
    j.state_reason, j.eligible_time = (
        "",
        c.now,
    )  # scontrol release (Slurm sets the eligible time anew)
    for _ in range(6):
        c.now += 50
        p.run_cycle()
        assert not promoted()  # 300 s since the release
    c.now += 5
    p.run_cycle()
    assert promoted() and p.ledger.waited(1) == pytest.approx(305.0)
