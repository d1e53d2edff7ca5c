"""What a researcher sees: ``dlsubmit status`` and ``slurm-dl explain`` at 80 columns, in words.

The start estimate has a column of its own (never cut), headers are words, a sweep is one line
summarised by its tasks' states, the script's events are sentences; ``explain`` by default says
place, GPUs ahead, what the job waits for and when Slurm expects it, with levers that fit the
job's shape and no scheduler internals; two cycles with the same inputs explain a job the same.
"""

from __future__ import annotations

import time
from pathlib import Path

from slurm_dl.dlsubmit.status import (
    detail_lines,
    event_text,
    log_display,
    status_table,
    task_counts,
    tasks_words,
    why_line,
)
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobState
from slurm_dl.explain.view import explain_text, explain_view, people_text

from test_explain_view import _queue

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


def _row(**kw) -> dict:
    row = {
        "job_id": 1234567,
        "name": "a-rather-long-job-name",
        "state": "PENDING",
        "reason": "Priority",
        "restarts": 0,
        "nodes": [],
        "kind": "train",
        "output": None,
        "checkpoint_dir": None,
        "last_checkpoint": None,
        "events": [],
        "explain": None,
        "why": None,
        "submitted_at": NOW - 60,
        "started_at": None,
        "telemetry": False,
        "gpu": None,
    }
    return {**row, **kw}


def test_the_start_estimate_has_its_own_column_and_no_line_is_cut_at_80() -> None:
    start = NOW + 3600
    rows = [
        _row(
            why=f"12th of 140, 1024 GPUs ahead, start ~{time.strftime('%H:%M', time.localtime(start))}",
            estimated_start=start,
        ),
        _row(job_id=7, state="PENDING", reason="Resources", estimated_start=start),
        _row(job_id=8, state="RUNNING", nodes=["gpu01", "gpu02"], started_at=NOW - 30, restarts=2),
    ]
    lines = status_table(rows, 80, now=NOW)
    assert all(len(ln) <= 80 for ln in lines), lines
    head = lines[0]
    assert "SUBMITTED" in head and "START" in head and "SUBM." not in head and " RS " not in head
    when = "~" + time.strftime("%H:%M", time.localtime(start))
    # a restart makes a RESTARTS column; the last column wraps under itself, never cut
    assert "RESTARTS" in head and "DEADLINE" not in head
    assert all("…" not in ln[head.index("WHERE") :] for ln in lines[1:])
    assert when in lines[1] and lines[1].endswith("12th of 140, 1024 GPUs")
    assert lines[2].strip() == "ahead" and lines[2].index("ahead") == head.index("WHERE")
    assert when in lines[3] and "waiting for free GPUs" in lines[3]
    assert "on gpu[01-02]" in lines[4] and " 2 on gpu" in lines[4]


def test_a_sweep_is_summarised_by_its_tasks_states() -> None:
    members = [
        Job(10, name="sw", state=JobState.RUNNING, array_job_id=10),
        Job(11, name="sw", state=JobState.RUNNING, array_job_id=10),
        Job(
            12,
            name="sw",
            state=JobState.PENDING,
            state_reason="JobArrayTaskLimit",
            array_job_id=10,
            array_tasks=1,
            array_throttle=2,
        ),
    ]
    counts = task_counts(members)
    assert counts == {"total": 3, "running": 2, "waiting": 1, "ended": 0, "throttle": 2}
    assert tasks_words(counts) == "3 tasks: 2 running, 1 waiting"
    assert tasks_words(counts, long=True) == "3 tasks: 2 running, 1 waiting (at most 2 run at once)"
    assert "JobArrayTaskLimit" not in why_line(_row(state="RUNNING", tasks=counts))


def test_events_read_as_sentences() -> None:
    at = str(int(NOW))
    assert event_text(f"{at} job=77 restart=0 event=start restart=0 (no checkpoint yet)").endswith(
        "started; no checkpoint to resume from yet"
    )
    resumed = event_text(f"{at} job=77 restart=1 event=resume restart=1 from=/ck/run/step-40")
    assert resumed.endswith("resumed from checkpoint step-40 (restart 1)") and "job=" not in resumed
    assert event_text(
        f"{at} job=77 restart=0 event=preempt signal=USR2 time_left_s=1500: checkpoint now"
    ).endswith("asked to checkpoint for another job (25 min of its time left)")
    assert event_text(f"{at} job=77 restart=0 event=exit rc=0").endswith("ended successfully")
    assert event_text(f"{at} job=77 restart=0 event=exit rc=3").endswith("ended with exit code 3")
    plain = event_text(f"{at} job=77 restart=0 torchrun not found: running the command once")
    assert "job=" not in plain and plain.endswith("torchrun not found: running the command once")


def test_a_sweeps_log_is_named_as_the_user_finds_it() -> None:
    assert log_display("/w/sw-7_%a.out", 3) == "/w/sw-7_0.out … sw-7_2.out"
    assert "%a" not in log_display("/w/sw-7_%a.out")
    assert log_display("/w/t-7.out", 3) == "/w/t-7.out"


def _ddp_2x8(job_id: int = 3, account: str = "") -> Job:
    return Job(
        job_id,
        user="u",
        account=account,
        num_gpus=16,
        num_nodes=2,
        gpus_per_node=8,
        submit_time=NOW - 50,
        time_limit=3600.0,
        state_reason="Resources",
    )


def test_explain_for_people_place_gpus_ahead_start_and_no_internals() -> None:
    ahead = Job(2, user="v", account="", num_gpus=8, submit_time=NOW - 100, state_reason="Priority")
    me = _ddp_2x8()
    q = _queue([ahead, me], NOW)
    view = explain_view(
        q[3],
        q,
        estimate={"at": NOW + 1800, "source": "slurm"},
        free_gpus_per_node=[7, 0, 0, 0],
        now=NOW,
    )
    text = people_text(view)
    lines = text.splitlines()
    assert all(len(ln) <= 80 for ln in lines), text
    assert "16 GPUs on 2 nodes" in lines[0]
    assert "place:      2nd of 2 waiting jobs; 8 GPUs ahead of it (1 job)" in text
    assert "start:      Slurm expects" in text and "(in 30 min)" in text
    assert "ahead:      job 2, because" in text
    for internal in (
        "SiteFactor",
        "tier ",
        "las 1 x",
        "queue 1 of",
        "(dl:",
        "sdl1:",
        "account -",
        "recent decisions:",
    ):
        assert internal not in text, internal
    # a 2-node DDP job is not told to shrink to what one node has free; no account, no account lever
    assert not any("instead of 16" in lv for lv in view["levers"]), view["levers"]
    assert not any("account" in lv for lv in view["levers"]), view["levers"]
    detail = explain_text(view, [{"at": NOW, "kind": "priority", "value": 5, "reason": "score"}])
    assert "recent decisions" in detail and "tier 1" in detail and "account -" not in detail


def test_a_one_node_job_still_hears_it_would_fit_with_fewer_gpus() -> None:
    me = Job(
        4, user="u", account="a", num_gpus=8, num_nodes=1, submit_time=NOW, state_reason="Resources"
    )
    q = _queue([me], NOW)
    view = explain_view(q[4], q, free_gpus_per_node=[6, 0], now=NOW)
    assert "with 6 GPUs instead of 8 it would fit on a node that is free now" in view["levers"]


def _queue_at(jobs: list[Job], now: float, led: Ledger) -> dict[int, dict]:
    return _queue(jobs, now, led=led)


def test_two_cycles_with_the_same_inputs_explain_a_waiting_job_the_same() -> None:
    """The prioritizer rebuilds the factors of a job deep in the queue only now and then (the
    rest of each cycle reuses them). Its account's usage decays meanwhile, so a neighbour's
    fresh factors and its stale ones differ although nothing about the two jobs changed: the
    explanation once said 'tied on every factor; decided by submit time' and a cycle later
    'decided by las + fairshare'. Keys of two moments are not compared."""
    led = Ledger(3600.0)
    other = Job(1, user="v", account="b", num_gpus=8, state=JobState.RUNNING, start_time=NOW - 3600)
    mine = Job(4, user="u", account="a", num_gpus=4, state=JobState.RUNNING, start_time=NOW - 3600)
    led.observe([other, mine], NOW - 3600)
    led.observe([other, mine], NOW)
    a = Job(2, user="u", account="a", num_gpus=8, submit_time=NOW - 100, state_reason="Priority")
    b = Job(3, user="u", account="a", num_gpus=8, submit_time=NOW - 90, state_reason="Priority")
    first = _queue_at([a, b], NOW, led)
    led.observe([other], NOW + 1800)  # account b's job runs on; a's ended: a's share moves
    later = _queue_at([a, b], NOW + 1800, led)
    # job 2 deep in the queue: its factors (and key) not rebuilt this cycle, its numbers are
    later[2] = {**first[2], **{k: later[2][k] for k in ("rank", "score", "at", "ranked", "state")}}
    assert first[3]["order_key"] != later[3]["order_key"]  # the shares did move between the cycles
    said = []
    for q in (first, later):
        view = explain_view(q[3], q, now=NOW)
        said.append(
            [
                w
                for n in view["ordering"].values()
                for w in [n["words"]]
                if "las" in w or "submit" in w
            ]
        )
    assert said[0] == [
        "submit time ("
        + time.strftime("%H:%M:%S", time.localtime(NOW - 90))
        + " vs "
        + time.strftime("%H:%M:%S", time.localtime(NOW - 100))
        + ")"
    ]
    assert not any("las + fairshare" in w for w in said[1]), (
        said
    )  # no other reason for the same two jobs
    assert set(said[1]) <= set(said[0]), said


def test_finished_jobs_take_their_state_from_accounting_else_from_dlsubmits_records(
    tmp_path: Path, monkeypatch
) -> None:
    from slurm_dl.dlsubmit.status import ended_rows, save_record
    from slurm_dl.cli.config_file import load_config as load
    from slurm_dl.dlsubmit.render import JobSpec, UserDefaults, render

    monkeypatch.setenv("SLURM_DL_STATE_DIR", str(tmp_path))
    job = render(
        JobSpec(kind="train", command=("x",), name="mine"),
        load(ROOT / "site-configs" / "testbed.toml"),
        UserDefaults(),
    )
    save_record(41, job, tmp_path)
    save_record(42, job, tmp_path)
    # no accounting: ended, as dlsubmit remembers it, pointing at its log
    rows = ended_rows(set(), accounting=lambda ids: None)
    assert [(r["job_id"], r["state"]) for r in rows] == [(41, "ENDED"), (42, "ENDED")]
    assert why_line(rows[0]) == "ended: dlsubmit logs 41"
    # sacct's records: the final state; a reused id (another name) is not taken for ours
    acct = {
        41: Job(41, name="mine", state=JobState.FAILED, nodes=("gpu01",), start_time=NOW),
        42: Job(42, name="someone-else", state=JobState.COMPLETED),
    }
    rows = ended_rows(set(), accounting=lambda ids: {i: acct[i] for i in ids})
    assert [(r["job_id"], r["state"]) for r in rows] == [(41, "FAILED"), (42, "ENDED")]
    assert why_line(rows[0]) == "failed: dlsubmit logs 41"
    assert [r["job_id"] for r in ended_rows(set(), only=42, accounting=lambda ids: None)] == [42]


def test_status_says_in_one_note_when_the_prioritizer_cannot_be_asked(
    tmp_path: Path, capsys
) -> None:
    from slurm_dl.dlsubmit.status import Explainer, describe_jobs, print_status
    from slurm_dl.cli.config_file import load_config as load
    from slurm_dl.testbed.site_toml import with_database_url

    cfg_file = (
        tmp_path / "site.toml"
    )  # a database that cannot be read here, and no explain endpoint
    cfg_file.write_text(
        with_database_url(
            (ROOT / "site-configs" / "testbed.toml").read_text(),
            f"sqlite:///{tmp_path / 'absent' / 'ledger.db'}",
        )
    )
    explainer = Explainer(load(cfg_file))
    rows = describe_jobs(
        [Job(9, name="r", state=JobState.PENDING, state_reason="Resources")], 9, explainer
    )
    assert rows[0]["why"] is None and explainer.unavailable
    print_status(rows, detail=False, note=explainer.unavailable)
    out = capsys.readouterr().out.splitlines()
    notes = [i for i, ln in enumerate(out) if ln.startswith("note: ")]
    assert (
        len(notes) == 1
        and "explain endpoint" in " ".join(out[notes[0] :])
        and "waiting for free GPUs" in out[1]
    )
    assert all(len(ln) <= 80 for ln in out)
    assert not (tmp_path / "absent").exists()  # nothing created where it could not read


def test_a_jobs_events_are_its_own_when_runs_share_a_checkpoint_directory() -> None:
    from slurm_dl.dlsubmit.status import own_events

    lines = [
        f"{int(NOW)} job=19 restart=0 event=exit rc=0",
        f"{int(NOW)} job=31 restart=0 event=start restart=0",
    ]
    assert own_events(lines, 31) == [lines[1]]
    assert own_events(lines, 7, sweep=True) == lines


def test_a_deadline_is_said_in_the_view_for_people() -> None:
    job = Job(
        5,
        user="u",
        account="a",
        num_gpus=1,
        submit_time=NOW - 10,
        time_limit=600.0,
        deadline=NOW + 7200,
        state_reason="Priority",
    )
    q = _queue([job], NOW)
    text = people_text(explain_view(q[5], q, now=NOW))
    assert "deadline:" in text and "to spare" in text, text
    q[5]["deadline_demoted"] = "deadlines already promised fill the GPUs set aside"
    text = people_text(explain_view(q[5], q, now=NOW))
    assert "not admitted, best effort" in text, text


def test_restarts_and_deadline_have_columns_when_any_job_has_them() -> None:
    due = NOW + 5 * 3600
    plain = status_table([_row(job_id=1)], 80, now=NOW)
    assert "RESTARTS" not in plain[0] and "DEADLINE" not in plain[0]
    lines = status_table([_row(job_id=1), _row(job_id=2, restarts=3, deadline=due)], 80, now=NOW)
    assert all(len(ln) <= 80 for ln in lines), lines
    assert "RESTARTS" in lines[0] and "DEADLINE" in lines[0]
    two = next(ln for ln in lines if ln.strip().startswith("2 "))
    assert " 3 " in two and time.strftime("%H:%M", time.localtime(due)) in two
    one = next(ln for ln in lines if ln.strip().startswith("1 "))
    assert " 0 " in one and " - " in one


def test_an_event_line_wraps_and_is_never_cut() -> None:
    at = str(int(NOW))
    long_note = "could not write the checkpoint: " + "no space left on the device " * 4
    row = _row(events=[f"{at} job=77 restart=0 event=error: {long_note.strip()}"])
    lines = detail_lines(row)
    start = lines.index("  recent events:")
    event = lines[start + 1 :]
    assert len(event) > 1 and all(len(ln) <= 80 for ln in event)
    assert "…" not in "".join(event) and event[1].startswith("      ")
    assert " ".join(ln.strip() for ln in event).endswith("left on the device")


def test_a_job_slurm_forgot_keeps_the_state_and_times_status_saw(
    tmp_path: Path, monkeypatch
) -> None:
    """Without accounting, a job that status saw COMPLETED stays COMPLETED (not ENDED), with
    Slurm's submit and start times, its restarts and deadline, once Slurm no longer lists it."""
    from slurm_dl.dlsubmit.status import describe_jobs, ended_rows, remember_ended, save_record
    from slurm_dl.cli.config_file import load_config as load
    from slurm_dl.dlsubmit.render import JobSpec, UserDefaults, render
    from slurm_dl.core.tags import JobTag, encode_tag
    from slurm_dl.core.model import JobClass

    monkeypatch.setenv("SLURM_DL_STATE_DIR", str(tmp_path))
    job = render(
        JobSpec(kind="train", command=("x",), name="mine"),
        load(ROOT / "site-configs" / "testbed.toml"),
        UserDefaults(),
    )
    save_record(51, job, tmp_path)
    due = int(NOW + 7200)
    tag = encode_tag(JobTag(job_class=JobClass.TRAIN, checkpointable=True, gpus=1, deadline=due))
    listed = Job(
        51,
        name="mine",
        state=JobState.COMPLETED,
        submit_time=NOW - 5000,
        start_time=NOW - 4000,
        restarts=2,
        nodes=("gpu03",),
        admin_comment=tag,
    )
    rows = describe_jobs([listed], None)
    assert rows[0]["deadline"] == due and rows[0]["started_at"] == NOW - 4000
    remember_ended(rows)
    (gone,) = ended_rows(set(), accounting=lambda ids: None)  # Slurm forgot it
    assert gone["state"] == "COMPLETED" and why_line(gone) == "completed: dlsubmit logs 51"
    assert (gone["submitted_at"], gone["started_at"]) == (NOW - 5000, NOW - 4000)
    assert (gone["restarts"], gone["deadline"], gone["nodes"]) == (2, due, ["gpu03"])


def test_explain_says_what_a_speeds_source_means() -> None:
    from slurm_dl.explain.view import gpu_type_words

    entry = {
        "accepted": ["h100", "a100"],
        "speeds": {
            "h100": {"speed": 3.0, "source": "default"},
            "a100": {"speed": 1.5, "source": "learnt", "samples": 4},
        },
    }
    words = gpu_type_words(entry)
    assert "h100 3x (the site's speed for any job on h100; none learnt yet)" in words
    assert "a100 1.5x (learnt from 4 runs)" in words and "(default)" not in words
