"""Learning a job's checkpoint time from its preemptions, and the wait it gives (pure)."""

from __future__ import annotations

from slurm_dl.core.checkpoint_time import (
    CheckpointObservation as Obs,
    is_late_requeue,
    is_lost_work,
    late_requeue_note,
    learn,
    lost_work_note,
    wait_seconds,
    wanted_lead,
)


def test_a_slower_save_replaces_the_estimate_a_faster_one_halves_the_gap() -> None:
    assert learn(None, Obs(30.0, True)) == 30.0
    assert learn(30.0, Obs(50.0, True)) == 50.0
    assert learn(50.0, Obs(10.0, True)) == 30.0


def test_a_save_cut_short_asks_twice_the_time_it_was_given() -> None:
    assert learn(None, Obs(90.0, False)) == 180.0
    assert learn(400.0, Obs(90.0, False)) == 400.0  # already known to need more


def test_the_wait_is_the_lead_or_what_the_job_needs_up_to_the_site_maximum() -> None:
    assert wait_seconds(90.0, None, 600.0) == 90.0
    assert wait_seconds(90.0, 20.0, 600.0) == 90.0  # never shorter than the job's own lead
    assert wait_seconds(90.0, 100.0, 600.0) == wanted_lead(100.0) == 130.0
    assert wait_seconds(90.0, 1000.0, 600.0) == 600.0


def test_the_notes_say_what_happened_in_words_and_are_recognised() -> None:
    lost = lost_work_note(90.0, 120.0)
    assert is_lost_work(lost) and not is_late_requeue(lost)
    assert "requeued 90 s after the signal, about 30 s before it would have finished" in lost
    assert "the work since its last checkpoint was lost" in lost
    assert "a lead of at least 230 s" in lost  # twice what it was given, with the margin
    assert "#" not in lost and "/" not in lost.replace("SIG@", "")
    late = late_requeue_note(150.0, "the waiting job had started")
    assert is_late_requeue(late) and "took 150 s" in late and "gave up its GPUs" in late
    assert not is_lost_work("requeued by slurm-dl for job 5") and not is_lost_work(None)
