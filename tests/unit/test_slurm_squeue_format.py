"""The fast ``squeue -O`` reader against ``squeue --json`` recorded at the same moment."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from slurm_dl.core.model import JobState
from slurm_dl.slurm.parse import parse_squeue_json
from slurm_dl.slurm.squeue_format import FIELDS, SEP, format_argument, parse_squeue_format

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def both():
    by_json = {
        j.job_id: j for j in parse_squeue_json(json.loads((FIX / "parity_squeue.json").read_text()))
    }
    by_format = {
        j.job_id: j for j in parse_squeue_format((FIX / "parity_squeue_format.txt").read_text())
    }
    return by_json, by_format


def test_format_argument_has_unpadded_fields_and_the_separator():
    arg = format_argument()
    assert arg.count(SEP) == len(FIELDS) and all(f"{name}:0{SEP}" in arg for name, _ in FIELDS)


def test_same_jobs_and_fields_as_json():
    by_json, by_format = both()
    assert (
        sorted(by_json) == sorted(by_format) == [1, 2, 3, 4, 5, 6]
    )  # cancelled job 7 filtered out
    for job_id, jj in by_json.items():
        fj = dataclasses.asdict(by_format[job_id])
        expected = dataclasses.asdict(jj)
        # squeue -O has no per-node allocation detail: an untyped --gpus=N job gets its GPU type
        # from its nodes in snapshot() (with_node_gpu_types), not from the reader.
        if fj["gpu_type"] is None:
            expected["gpu_type"] = None
        assert fj == expected, job_id


def test_recorded_values():
    _, jobs = both()
    run3 = jobs[1]
    assert run3.comment == "hello | world" and run3.admin_comment == "slurmdl:v1:class=train"
    assert (run3.state, run3.num_gpus, run3.nodes, run3.time_limit) == (
        JobState.RUNNING,
        3,
        ("gpu01",),
        1800,
    )
    assert (
        jobs[2].nodes == ("gpu03", "gpu04")
        and jobs[2].num_gpus == 16
        and jobs[2].gpus_per_node == 8
    )
    held = jobs[3]
    assert (
        held.name == "held job"
        and held.nice == 50
        and held.priority == 0
        and held.eligible_time is None
    )
    later = jobs[4]
    assert later.time_limit == 86400 and later.priority == 1300 and later.deadline == 1795234608.0


def test_states_filter_and_junk_lines():
    text = (FIX / "parity_squeue_format.txt").read_text()
    cancelled = parse_squeue_format(text, [JobState.CANCELLED])
    assert [j.job_id for j in cancelled] == [7]
    assert parse_squeue_format("garbage\n\n" + SEP * 3 + "\n") == []


def test_line_memo_parses_each_line_once_and_hands_out_the_same_jobs():
    from slurm_dl.slurm.squeue_format import LineMemo

    text = (FIX / "parity_squeue_format.txt").read_text()
    plain = parse_squeue_format(text)
    memo = LineMemo()
    first = parse_squeue_format(text, memo=memo)
    assert memo.parsed == len(text.splitlines()) - sum(
        1 for line in text.splitlines() if not line.strip()
    )
    assert [dataclasses.asdict(j) for j in first] == [dataclasses.asdict(j) for j in plain]
    second = parse_squeue_format(text, memo=memo)
    assert memo.parsed == 0  # every line known
    assert [dataclasses.asdict(j) for j in second] == [dataclasses.asdict(j) for j in plain]
    assert all(a is b for a, b in zip(first, second))  # no copy per snapshot (see LineMemo)
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if "\x1fBeginTime\x1f" in line)
    changed = [*lines]
    changed[i] = lines[i].replace("\x1fBeginTime\x1f", "\x1fPriority\x1f")  # its reason moved on
    small = parse_squeue_format(lines[i] + "\n", memo=memo)  # a small query in between
    assert [j.job_id for j in small] == [4] and memo.parsed == 0
    again = parse_squeue_format("\n".join(changed) + "\n", memo=memo)
    assert memo.parsed == 1  # only the changed line parsed again; the rest still known
    assert next(j for j in again if j.job_id == 4).state_reason == "Priority"
