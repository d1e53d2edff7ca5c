"""Job ids on the command line: one parser, Slurm's forms only, and commands that hand Slurm
exactly the job named (``2_9`` is task 9 of array 2, never job 29)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.core.errors import JobNotFoundError, SlurmError
from slurm_dl.core.jobid import MAX_JOB_ID, MAX_TASKS_NAMED, JobIdError, JobRef, parse_job_ref
from slurm_dl.slurm.job_lookup import FIELDS, find_job, lookup_argv, pick_job
from slurm_dl.slurm.squeue_format import FIELDS as JOB_FIELDS
from slurm_dl.slurm.squeue_format import SEP

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "site-configs" / "testbed.toml"
runner = CliRunner()


@pytest.mark.parametrize(
    "text, job, task, spans, het, slurm",
    [
        ("27", 27, None, (), None, "27"),
        ("027", 27, None, (), None, "27"),  # scancel and squeue read 027 as 27
        ("2_9", 2, 9, (), None, "2_9"),
        ("1_000", 1, 0, (), None, "1_0"),  # task 0 of job 1, as in Slurm; never job 1000
        ("2_09", 2, 9, (), None, "2_9"),
        ("27_[4]", 27, 4, (), None, "27_4"),
        ("27+0", 27, None, (), 0, "27+0"),
        ("27+127", 27, None, (), 127, "27+127"),
        (str(MAX_JOB_ID), MAX_JOB_ID, None, (), None, str(MAX_JOB_ID)),
        ("1_4000000", 1, 4_000_000, (), None, "1_4000000"),
    ],
)
def test_one_job_forms(text, job, task, spans, het, slurm) -> None:
    for several in (False, True):
        ref = parse_job_ref(text, several=several)
        assert (ref.job_id, ref.task, ref.spans, ref.het_offset) == (job, task, spans, het)
        assert str(ref) == slurm


def test_2_9_is_task_9_of_array_2_and_never_job_29() -> None:
    ref = parse_job_ref("2_9")
    assert ref == JobRef(2, task=9) and str(ref) != "29" and not ref.plain
    with pytest.raises(TypeError):
        int(ref)  # type: ignore[call-overload]  # no way to glue the parts into a number


@pytest.mark.parametrize(
    "text, slurm, count",
    [
        ("27_[1-3]", "27_[1-3]", 3),
        ("27_[1,3,5-7]", "27_[1,3,5-7]", 5),
        ("27_[01-03,7]", "27_[1-3,7]", 4),
        ("27_[1-5,3-7]", "27_[1-5,3-7]", 7),  # overlaps count once, as Slurm keeps a set
        (f"27_[0-{MAX_TASKS_NAMED - 1}]", f"27_[0-{MAX_TASKS_NAMED - 1}]", MAX_TASKS_NAMED),
    ],
)
def test_several_tasks_only_where_a_command_takes_them(text, slurm, count) -> None:
    ref = parse_job_ref(text, several=True)
    assert str(ref) == slurm and ref.task_count == count and ref.task is None
    with pytest.raises(JobIdError, match="several array tasks; give one, like 27_"):
        parse_job_ref(text)


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "use 27"),
        ("27__1", "use 27"),
        ("27_", "use 27"),
        ("_1", "use 27"),
        ("27_[1-3", "use 27"),
        ("27_[]", "use 27"),
        ("27_[1,,2]", "use 27"),
        ("27_[-2]", "use 27"),
        ("27_[0-8:4]", "use 27"),
        ("27_1_2", "use 27"),
        ("27_1+0", "use 27"),
        ("27+", "use 27"),
        ("+27", "use 27"),
        ("-27", "use 27"),
        (" 27", "use 27"),
        ("27 ", "use 27"),
        ("2 9", "use 27"),
        ("27\n", "use 27"),
        ("27.0", "use 27"),
        ("1e3", "use 27"),
        ("0x1b", "use 27"),
        ("27.batch", "use 27"),
        ("abc", "use 27"),
        ("２７", "use 27"),
        ("٢٧", "use 27"),
        ("2_٩", "use 27"),
        ("27+０", "use 27"),
        ("2_9%2", "%N throttle"),
        ("27_[1-3]%1", "%N throttle"),
        ("27%", "%N throttle"),
        ("0", "from 1 to 4294967293"),
        ("00", "from 1 to 4294967293"),
        ("0_1", "from 1 to 4294967293"),
        ("4294967294", "from 1 to 4294967293"),
        ("99999999999999999999", "from 1 to 4294967293"),
        ("1_4000001", "from 0 to 4000000"),
        ("1_99999999999999999999", "from 0 to 4000000"),
        ("1_[0-4000001]", "from 0 to 4000000"),
        ("27+128", "from 0 to 127"),
        ("27_[3-1]", "runs backwards"),
        ("1" * 300, "use 27"),
    ],
)
def test_refusals_are_one_line_naming_the_forms(text, words) -> None:
    for several in (False, True):
        with pytest.raises(JobIdError) as info:
            parse_job_ref(text, several=several)
        msg = str(info.value)
        assert words in msg and "\n" not in msg, msg
        assert len("error: " + msg) <= 80, msg
        assert "#" not in msg and "slurm_dl" not in msg and ".py" not in msg, msg


def test_a_range_may_name_only_so_many_tasks_and_is_never_expanded() -> None:
    with pytest.raises(JobIdError, match="name the array, 27"):
        parse_job_ref(f"27_[0-{MAX_TASKS_NAMED}]", several=True)
    ref = JobRef(27, spans=((0, 4_000_000),) * 3)
    assert ref.task_count == 4_000_001  # counted, not listed


def test_not_a_string_is_refused() -> None:
    for value in (27, None, b"27", 2.9):
        with pytest.raises(JobIdError):
            parse_job_ref(value)


# -- the edge: which record Slurm keeps a task or component under ---------------------------------


def _rows(*rows: tuple) -> str:
    return "".join(SEP.join(str(v) for v in row) + SEP + "\n" for row in rows)


# JobID, ArrayJobID, ArrayTaskID, HetJobID, HetJobOffset, State
PLAIN_29 = (29, 29, "N/A", "N/A", "N/A", "PENDING")


def test_lookup_asks_squeue_in_slurms_own_form() -> None:
    argv = lookup_argv(JobRef(2, task=9))
    assert argv[argv.index("-j") + 1] == "2_9" and all(name in argv[-1] for name in FIELDS)


def test_a_started_task_is_its_own_job_and_a_waiting_one_its_arrays() -> None:
    text = _rows(PLAIN_29, (31, 2, 9, "N/A", "N/A", "RUNNING"), (2, 2, 8, "N/A", "N/A", "PENDING"))
    assert pick_job(JobRef(2, task=9), text).job_id == 31
    waiting = pick_job(JobRef(2, task=8), text)
    assert waiting.job_id == 2 and "pending in the array's own record, job 2" in waiting.note


def test_a_hetjob_component_is_matched_exactly() -> None:
    text = _rows((27, 27, "N/A", 27, 0, "PENDING"), (28, 28, "N/A", 27, 1, "PENDING"), PLAIN_29)
    assert pick_job(JobRef(27, het_offset=1), text).job_id == 28
    assert pick_job(JobRef(27, het_offset=0), text).job_id == 27
    with pytest.raises(JobNotFoundError, match="27\\+2"):
        pick_job(JobRef(27, het_offset=2), text)


def test_no_exact_row_is_not_found_never_another_job() -> None:
    for text in (
        "",
        _rows(PLAIN_29),
        _rows((2, 2, "0-8", "N/A", "N/A", "PENDING")),
        "junk\n" + SEP * 2,
    ):
        with pytest.raises(JobNotFoundError, match="job 2_9: Slurm does not know it"):
            pick_job(JobRef(2, task=9), text)
    with pytest.raises(SlurmError, match="several jobs"):
        pick_job(
            JobRef(2, task=9),
            _rows((31, 2, 9, "N/A", "N/A", "RUNNING"), (32, 2, 9, "N/A", "N/A", "RUNNING")),
        )


def test_a_plain_id_needs_no_lookup_and_ranges_are_not_one_job() -> None:
    assert find_job(JobRef(29)).job_id == 29  # no Slurm call
    with pytest.raises(ValueError):
        find_job(JobRef(2, spans=((1, 3),)))


def test_the_backend_never_turns_a_string_into_a_job_id() -> None:
    from slurm_dl.slurm.cli_backend import _job_id

    assert _job_id(JobRef(2, task=9)) == "2_9" and _job_id(JobRef(27, het_offset=0)) == "27+0"
    assert _job_id(29) == "29"
    for bad in ("2_9", "29", 0, -1, True, 2.0):
        with pytest.raises(JobNotFoundError):
            _job_id(bad)  # type: ignore[arg-type]


# -- the commands, with Slurm's clients faked on PATH --------------------------------------------


def _job_line(
    job_id: int, state: str, name: str = "w", array_job: int | None = None, task: str = "N/A"
) -> str:
    values = {
        "JobID": job_id,
        "UserName": "u",
        "Account": "a",
        "Name": name,
        "Partition": "gpu",
        "State": state,
        "Reason": "None",
        "NumNodes": 1,
        "ArrayJobID": array_job or job_id,
        "ArrayTaskID": task,
        "RestartCnt": 0,
        "Nice": 0,
        "PriorityLong": 1,
    }
    return SEP.join(str(values.get(name, "")) for name, _ in JOB_FIELDS) + SEP + "\n"


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``squeue`` and ``scancel`` that log their arguments; squeue answers from files."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = f'#!/bin/bash\nprintf "%s\\n" "$(basename "$0") $*" >> "{tmp_path}/calls"\n'
    answers = f'case "$*" in *HetJobOffset*) cat "{tmp_path}/lookup" ;; *" -O "*) cat "{tmp_path}/jobs" ;; esac\n'
    for name, body in (("squeue", log + answers), ("scancel", log)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "lookup").write_text(
        _rows(PLAIN_29, (31, 2, 9, "N/A", "N/A", "RUNNING"), (2, 2, 8, "N/A", "N/A", "PENDING"))
    )
    (tmp_path / "jobs").write_text(
        _job_line(29, "PENDING", "other")
        + _job_line(31, "RUNNING", "task9", 2, "9")
        + _job_line(2, "PENDING", "array", 2, "8")
    )
    (tmp_path / "calls").write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_DL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLURM_DL_USER_DEFAULTS", str(tmp_path / "user.toml"))
    monkeypatch.delenv("SLURM_DL_CONFIG", raising=False)
    return tmp_path


def _calls(d: Path, command: str) -> list[str]:
    return [
        ln.split(" ", 1)[1]
        for ln in (d / "calls").read_text().splitlines()
        if ln.startswith(command + " ")
    ]


@pytest.mark.parametrize(
    "given, slurm",
    [
        ("2_9", "2_9"),
        ("02_09", "2_9"),
        ("27_[1-3,5]", "27_[1-3,5]"),
        ("27+0", "27+0"),
        ("29", "29"),
    ],
)
def test_cancel_hands_scancel_slurms_own_form(fake_slurm: Path, given: str, slurm: str) -> None:
    from slurm_dl.dlsubmit.cli import app

    r = runner.invoke(app, ["cancel", given])
    assert r.exit_code == 0, r.output
    assert (
        _calls(fake_slurm, "scancel") == [f"-v {slurm}"]
        and r.stdout.strip() == f"cancelled {slurm}"
    )


@pytest.mark.parametrize("given", ["2_9%1", "２９", "٢_٩", "2__9", "-29", "2_", "0"])
def test_cancel_refuses_before_slurm_is_asked(fake_slurm: Path, given: str) -> None:
    from slurm_dl.dlsubmit.cli import app

    r = runner.invoke(app, ["cancel", "--", given])
    assert (
        r.exit_code != 0 and r.output.startswith("error: JOBID") and len(r.output.splitlines()) == 1
    ), r.output
    assert _calls(fake_slurm, "scancel") == []


def test_status_of_an_array_task_shows_that_task_never_the_concatenated_id(
    fake_slurm: Path,
) -> None:
    from slurm_dl.dlsubmit.cli import app

    r = runner.invoke(app, ["status", "2_9", "--json"])
    assert r.exit_code == 0, r.output
    assert [row["job_id"] for row in json.loads(r.stdout)] == [31]
    waiting = runner.invoke(app, ["status", "2_8", "--json"])
    assert [row["job_id"] for row in json.loads(waiting.stdout)] == [2]
    assert "note: 2_8 is pending in the array's own record, job 2" in waiting.stderr
    gone = runner.invoke(app, ["status", "2_7"])
    assert gone.exit_code == 1 and "job 2_7: Slurm does not know it" in gone.output
    bad = runner.invoke(app, ["status", "2_9%1"])
    assert bad.exit_code == 1 and "throttle" in bad.output
    assert all("-j 29 " not in c for c in _calls(fake_slurm, "squeue"))


def _store_with(url: str, job_ids: list[int]) -> None:
    from slurm_dl.cli.config_file import load_config
    from slurm_dl.core.explain import explain_job
    from slurm_dl.core.ledger import Ledger
    from slurm_dl.core.model import Job
    from slurm_dl.core.policy import PolicyContext, get_policy
    from slurm_dl.store import CycleWrite, Store

    cfg, led = load_config(CONFIG), Ledger(3600.0)
    policy = get_policy("combined", cfg)
    ctx = PolicyContext(now=100.0, ledger=led, config=cfg, total_gpus=32)
    expl = {
        j: explain_job(
            Job(j, account="a", num_gpus=1, submit_time=50.0),
            ctx,
            policy,
            score=0.5,
            site_factor=j,
            rank=0,
            ranked=1,
        )
        for j in job_ids
    }
    Store(url).save_cycle(
        CycleWrite(now=100.0, cycle=1, ledger=led, explanations=expl, decisions=[])
    )


def test_explain_of_an_array_task_reads_that_task_never_the_concatenated_id(
    fake_slurm: Path,
) -> None:
    from slurm_dl.cli.main import app

    url = f"sqlite:///{fake_slurm / 'p.db'}"
    _store_with(url, [2, 29, 31])
    base = ["--config", str(CONFIG), "--db", url, "--no-live", "--json"]
    for given, shown in (("2_9", 31), ("2_8", 2), ("29", 29), ("029", 29)):
        r = runner.invoke(app, ["explain", given, *base])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["job_id"] == shown, given
    for bad in ("2_9%1", "٢٩", "2__9", "99999999999999999999"):
        r = runner.invoke(app, ["explain", bad, *base])
        assert r.exit_code == 1 and r.output.startswith("error: JOBID"), r.output
    r = runner.invoke(app, ["explain", "2_7", *base])
    assert r.exit_code == 1 and "job 2_7: Slurm does not know it" in r.output
