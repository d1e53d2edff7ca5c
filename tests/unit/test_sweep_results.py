"""A sweep's results in dlsubmit status: each task's ``DLSUBMIT_RESULT {json}`` line or its
``$DL_RESULT`` file, in the table, the detail and ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

from slurm_dl.dlsubmit.results import (
    result_in_log,
    result_lines,
    results_summary,
    sweep_results,
)
from slurm_dl.dlsubmit.status import detail_lines, status_table


def test_the_last_result_line_counts_and_json_is_read() -> None:
    log = 'epoch 1\nDLSUBMIT_RESULT {"loss": 0.5}\nDLSUBMIT_RESULT {"loss": 0.25}\nbye\n'
    assert result_in_log(log) == (True, {"loss": 0.25})
    assert result_in_log("DLSUBMIT_RESULT 0.31\n") == (True, 0.31)
    assert result_in_log("DLSUBMIT_RESULT not json\n") == (True, "not json")
    assert result_in_log("MY_DLSUBMIT_RESULT 1\nDLSUBMIT_RESULTS 2\n") == (False, None)


def _sweep(tmp_path: Path, tasks: int) -> tuple[Path, str]:
    ckpt = tmp_path / "ckpt"
    for i in range(tasks):
        (ckpt / f"task-{i}" / ".dlsubmit").mkdir(parents=True)
        (ckpt / f"task-{i}" / ".dlsubmit" / "events").write_text(
            f"1800000000 job=9 restart=0 event=task index={i} param=--lr 0.{i + 1}\n"
        )
    return ckpt, str(tmp_path / "sw-9_%a.out")


def test_each_task_reports_by_file_or_by_log_and_the_file_wins(tmp_path: Path) -> None:
    ckpt, output = _sweep(tmp_path, 3)
    Path(output.replace("%a", "0")).write_text('DLSUBMIT_RESULT {"acc": 0.9}\n')
    Path(output.replace("%a", "1")).write_text('DLSUBMIT_RESULT {"acc": 0.1}\n')
    (ckpt / "task-1" / ".dlsubmit" / "result.json").write_text('{"acc": 0.8}')
    results = sweep_results(str(ckpt), output)
    assert results == [
        {"task": 0, "param": "--lr 0.1", "result": {"acc": 0.9}},
        {"task": 1, "param": "--lr 0.2", "result": {"acc": 0.8}},
        {"task": 2, "param": "--lr 0.3", "result": None},  # nothing yet (no log either)
    ]
    assert results_summary(results) == "results: 2 of 3 tasks"
    lines = result_lines(results)
    assert lines[0] == '    task 0 (--lr 0.1): {"acc": 0.9}' and lines[2].endswith("none yet")
    assert sweep_results(None, output) == [] and sweep_results(str(tmp_path / "no"), None) == []


def test_status_shows_them_in_the_table_the_detail_and_json(tmp_path: Path) -> None:
    ckpt, output = _sweep(tmp_path, 2)
    Path(output.replace("%a", "0")).write_text('DLSUBMIT_RESULT {"acc": 0.9}\n')
    row = {
        "job_id": 9,
        "name": "sw",
        "state": "COMPLETED",
        "reason": "",
        "restarts": 0,
        "nodes": [],
        "kind": "sweep",
        "output": output,
        "checkpoint_dir": str(ckpt),
        "last_checkpoint": None,
        "events": [],
        "explain": None,
        "why": None,
        "submitted_at": None,
        "started_at": None,
        "telemetry": False,
        "gpu": None,
        "results": sweep_results(str(ckpt), output),
    }
    table = status_table([row], 80)
    assert table[-1].strip() == "results: 1 of 2 tasks (dlsubmit status 9)"
    detail = detail_lines(row)
    assert "  results: 1 of 2 tasks:" in detail and '    task 0 (--lr 0.1): {"acc": 0.9}' in detail
    assert json.loads(json.dumps(row))["results"][0]["result"] == {"acc": 0.9}
