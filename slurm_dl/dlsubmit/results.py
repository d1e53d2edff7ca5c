"""A sweep's results, task by task, for ``dlsubmit status`` and its ``--json``.

A task reports its result in one of two ways: it prints a line ``DLSUBMIT_RESULT {json}`` (the
last such line in its log counts), or it writes JSON to the file ``$DL_RESULT``
(``$CKPT_DIR/.dlsubmit/result.json``, hidden, so never taken for a checkpoint). The file wins
over a printed line. A value that is not JSON is kept as its text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

RESULT_MARK = "DLSUBMIT_RESULT"
RESULT_FILE = ".dlsubmit/result.json"  # inside a task's checkpoint directory
LOG_TAIL = 65_536  # bytes of a task's log read from its end
MAX_TASKS = 10_000
_TASK_EVENT = re.compile(r"event=task index=(\d+) param=(.*)$")


def parse_result(text: str) -> Any:
    """A reported value: JSON when it is, else the text itself (stripped)."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        return text


def result_in_log(text: str) -> tuple[bool, Any]:
    """(found, value) of the last ``DLSUBMIT_RESULT …`` line in a log's text."""
    for line in reversed(text.splitlines()):
        head, _, rest = line.strip().partition(" ")
        if head == RESULT_MARK:
            return True, parse_result(rest)
    return False, None


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _param(task_dir: Path) -> str | None:
    text = _tail(task_dir / ".dlsubmit" / "events")
    for line in reversed(text.splitlines()):
        m = _TASK_EVENT.search(line)
        if m:
            return m.group(2)
    return None


def sweep_results(checkpoint_dir: str | None, output: str | None) -> list[dict[str, Any]]:
    """``{"task", "param", "result"}`` for each task that has started (its ``task-N``
    directory exists), in task order; ``result`` None while it has reported nothing."""
    if not checkpoint_dir:
        return []
    try:
        dirs = [p for p in Path(checkpoint_dir).glob("task-*") if p.name[5:].isdigit()]
    except OSError:
        return []
    out = []
    for task_dir in sorted(dirs, key=lambda p: int(p.name[5:]))[:MAX_TASKS]:
        index = int(task_dir.name[5:])
        found, value = False, None
        try:
            found, value = True, parse_result((task_dir / RESULT_FILE).read_text())
        except (OSError, UnicodeDecodeError):
            if output:
                found, value = result_in_log(_tail(Path(output.replace("%a", str(index)))))
        out.append({"task": index, "param": _param(task_dir), "result": value if found else None})
    return out


def results_summary(results: list[dict[str, Any]]) -> str:
    """``results: 2 of 3 tasks`` for the status table."""
    have = sum(1 for r in results if r["result"] is not None)
    return f"results: {have} of {len(results)} tasks"


def result_lines(results: list[dict[str, Any]], width: int = 80) -> list[str]:
    """Each task's result on its own line(s) for ``dlsubmit status JOBID``."""
    import textwrap

    lines = []
    for r in results:
        value = "none yet" if r["result"] is None else json.dumps(r["result"])
        param = f" ({r['param']})" if r["param"] is not None else ""
        lines.extend(
            textwrap.wrap(
                f"task {r['task']}{param}: {value}",
                width,
                initial_indent="    ",
                subsequent_indent="      ",
                break_on_hyphens=False,
            )
        )
    return lines
