"""The fast job reader: ``squeue -h -t PD,R,CG,S -O <fields>`` with a unit-separator suffix.

Why not ``squeue --json`` by default: in 22.05 its serializer is the bottleneck (5,000 pending
jobs = 15.7 MB of JSON, ~1.5-1.9 s for squeue alone, measured on the testbed), while ``-O`` prints
the same fields in ~0.1 s, and it honours ``-t`` so finished jobs are not even sent.
``SLURM_TIME_FORMAT=%s`` makes Slurm print times as epoch seconds. Field size 0 = no padding,
no truncation. Values cannot contain the separator (0x1f), which Slurm never emits.

``parse_squeue_format`` is pure and maps each record to the ``squeue --json`` record shape, so one
parser (``parse.job_from_squeue``) builds every ``Job`` whichever way it was read.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import is_, is_not
from sys import intern
from typing import Any, Iterable

from ..core.model import Job, JobState
from .parse import _duration_s, job_from_squeue, select_jobs

SEP = "\x1f"
ACTIVE_STATES = "PD,R,CG,S"
TIME_FORMAT_ENV = {"SLURM_TIME_FORMAT": "%s"}

# (squeue -O field, squeue --json key)
FIELDS: tuple[tuple[str, str], ...] = (
    ("JobID", "job_id"),
    ("UserName", "user_name"),
    ("Account", "account"),
    ("Name", "name"),
    ("Partition", "partition"),
    ("State", "job_state"),
    ("Reason", "state_reason"),
    ("tres-per-node", "tres_per_node"),
    ("tres-per-job", "tres_per_job"),
    ("NumNodes", "node_count"),
    ("TimeLimit", "time_limit"),
    ("SubmitTime", "submit_time"),
    ("StartTime", "start_time"),
    ("EligibleTime", "eligible_time"),
    ("Deadline", "deadline"),
    ("Nice", "nice"),
    ("PriorityLong", "priority"),
    ("RestartCnt", "restart_cnt"),
    ("NodeList", "nodes"),
    ("Comment", "comment"),
    ("admin_comment", "admin_comment"),
    # read since GPUs are counted from every form and from the allocation (older recordings lack them)
    ("tres-per-task", "tres_per_task"),
    ("tres-per-socket", "tres_per_socket"),
    ("NumTasks", "tasks"),
    ("Sockets", "sockets_per_node"),
    ("tres-alloc", "tres_alloc_str"),
    ("Requeue", "requeue"),
    ("ArrayJobID", "array_job_id"),
    ("ArrayTaskID", "array_task_id"),
    ("QOS", "qos"),
    ("Feature", "features"),
)


_REQUIRED = 21  # fields every recording has; the later ones may be missing (read as unset)


def format_argument() -> str:
    return ",".join(f"{name}:0{SEP}" for name, _ in FIELDS)


def squeue_format_argv(states: str = ACTIVE_STATES) -> list[str]:
    return ["squeue", "-h", "-t", states, "-O", format_argument()]


_EMPTY = {"", "(null)", "N/A", "n/a", "None assigned"}
_INT_KEYS = {
    "job_id",
    "node_count",
    "nice",
    "priority",
    "restart_cnt",
    "submit_time",
    "start_time",
    "eligible_time",
    "deadline",
    "tasks",
    "sockets_per_node",
    "array_job_id",
}


def _value(key: str, text: str) -> Any:
    text = text.strip() if key not in ("comment", "admin_comment", "name") else text
    if text in _EMPTY:
        return None
    if key == "time_limit":
        seconds = _duration_s(text)
        return None if seconds is None else int(seconds // 60)
    if key in _INT_KEYS:
        try:
            return int(text)
        except ValueError:
            return None
    # one object per distinct text (users, accounts, reasons, tags repeat across a queue): the
    # memo holds far less, and the cycle's passes over 100,000 jobs touch far less memory
    return intern(text)


def record_from_format_line(line: str) -> dict[str, Any] | None:
    parts = line.split(SEP)
    if len(parts) < _REQUIRED:
        return None
    parts += [""] * (len(FIELDS) - len(parts))
    rec = {key: _value(key, parts[i]) for i, (_, key) in enumerate(FIELDS)}
    if rec["job_id"] is None:
        return None
    if rec["state_reason"] is None:
        rec["state_reason"] = "None"
    return rec


def parse_squeue_format(
    text: str, states: Iterable[JobState] | None = None, memo: "LineMemo | None" = None
) -> list[Job]:
    """Jobs from ``squeue -O`` output made with ``format_argument()`` (pending and active by
    default). ``memo``: lines parsed by an earlier call are not parsed again (see LineMemo)."""
    if memo is not None:
        return select_jobs(memo.jobs(text), states)
    records = (record_from_format_line(line) for line in text.splitlines())
    return select_jobs((job_from_squeue(rec) for rec in records if rec is not None), states)


class LineMemo:
    """Each distinct ``squeue -O`` line is parsed once. A line holds everything its Job is built
    from (times print as epoch seconds), and between two snapshots of a large queue almost every
    line is the same: at 110,000 jobs parsing every line costs about 2.8 s. It keeps the lines
    of its latest two calls (a small query between two snapshots does not make the next snapshot
    parse everything again), so it holds about what the queue's Jobs hold.

    The Jobs it returns are its own: the same object for the same line, call after call (at
    110,000 jobs a copy of each cost 0.15-0.3 s and 48 MB allocated and freed per cycle). A
    caller may change one only in ways that give the same Job each time they are made to a
    fresh parse of its line (filling in what the line lacks: SiteFactor, tags, the ledger's
    figures); anything else is undone before the next call (the prioritizer's cycle does so)
    or done to a copy (``dataclasses.replace``).
    """

    def __init__(self) -> None:
        self._latest: dict[str, Job] = {}  # line -> its Job
        self._before: dict[str, Job] = {}
        self.parsed = 0  # lines parsed by the latest call (the rest came from the memo)

    def jobs(self, text: str) -> list[Job]:
        # C-level maps over the lines (a large queue's lines are nearly all in ``latest``);
        # Python only for the others
        latest, before, parsed = self._latest, self._before, 0
        lines = text.splitlines()
        found: list[Job | None] = list(map(latest.get, lines))
        for i in compress(range(len(lines)), map(is_, found, repeat(None))):
            line = lines[i]
            job = before.get(line)
            if job is None:
                rec = record_from_format_line(line)
                if rec is None:
                    continue  # not a job's line: left out below
                job = job_from_squeue(rec)
                parsed += 1
            found[i] = job
        if any(map(is_, found, repeat(None))):
            kept = list(map(is_not, found, repeat(None)))
            lines, found = list(compress(lines, kept)), list(compress(found, kept))
        self._before, self._latest, self.parsed = latest, dict(zip(lines, found)), parsed
        return found
