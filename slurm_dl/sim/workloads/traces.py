"""Trace readers: each turns one public trace format into :class:`slurm_dl.core.model.Job` objects.

Every job gets ``duration`` (true run time, seconds) and ``submit_time`` in seconds from the
trace's own origin. Rows are numbered from the file's line numbers, and the job order returned
is the file order (the simulator's tie-break for equal submit times). A bad row raises
:class:`~slurm_dl.core.errors.TraceError` naming the file and the line.

Formats
-------
``philly``   ``timestamp,duration,num_gpus,gpu_time,cluster`` — timestamp ``YYYY-MM-DD HH:MM:SS``
             (UTC), duration in seconds; ``cluster`` (the VC) becomes the account and the user.
``chronus``  ``job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,
             expect_time_list,expect_value_list,best_effort,job_type`` — times in MINUTES (converted
             to seconds here); ``user`` (``vc_XXXX``) is the account; ``strict`` jobs get a hard
             ``deadline = submit + expect_time``; ``soft`` jobs get ``soft_deadlines`` of
             (time, value) steps; ``best`` jobs have none. Deadline (strict, soft) jobs get
             ``time_limit = duration``: Chronus profiles their iterations before admission.
``tiresias`` ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval`` — seconds.
``openb``    the openb pod list (``hetero/openb_pod_list_*.csv``): tasks with GPUs that were
             scheduled; submit ``creation_time``, run time ``deletion_time - scheduled_time``
             (seconds); ``qos`` (LS, Burstable, BE) is the account; ``gpu_spec`` (``V100M16|
             V100M32``) the GPU types the task accepts (``Job.accepted_types``; empty: any). A
             task asking part of one GPU (``gpu_milli`` < 1000) takes a whole one here.
``csv``      slurm-dl's own plain CSV. Required columns: ``submit_time`` (seconds, or
             ``YYYY-MM-DD HH:MM:SS``), ``duration`` (seconds), ``num_gpus``. Optional: ``job_id``,
             ``user``, ``account``, ``name``, ``time_limit`` (seconds), ``deadline`` (seconds,
             absolute, same clock as submit_time), ``job_class``, ``checkpointable`` (0/1),
             ``gpu_util`` (below).

GPU utilisation (optional, any format)
--------------------------------------
A ``gpu_util`` column, read in every format whose file carries it (none of the public traces
does), gives each job's GPU utilisation for the idle-policy what-if (``slurm-dl simulate
--idle-policy``): a constant percentage (``35``) or a profile over the job's run time,
``OFFSET_SECONDS:PERCENT`` steps joined by ``;`` starting at 0 (``0:85;3600:0`` = 85 % from the
start, idle from one hour of run time on); an empty cell means unknown. The same values can come
from a join file (``--utilisation FILE``: CSV ``job_id,gpu_util``, keyed by the job ids read
here — Philly's is its data row number, 1 for the first job). A bad value raises
:class:`~slurm_dl.core.errors.TraceError` naming the file, line, column and value. See
:mod:`slurm_dl.sim.workloads.utilisation`.
"""

from __future__ import annotations

import csv
import io
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ...core.errors import TraceError
from ...core.model import Job, JobClass
from ...core.policy.history import BATCH_TAG
from .utilisation import UTIL_TAG, parse_profile

FORMATS = ("philly", "chronus", "tiresias", "csv", "openb", "sacct-json", "sacct", "helios")
HISTORY_FORMATS = ("sacct-json", "sacct", "helios")  # see slurm_dl.sim.workloads.history
_TS = "%Y-%m-%d %H:%M:%S"


def parse_time(value: str) -> float:
    """``YYYY-MM-DD[ HH:MM[:SS]]`` (UTC) or plain seconds → seconds (epoch for dates)."""
    v = value.strip()
    try:
        f = float(v)
    except ValueError:
        pass
    else:
        if not math.isfinite(f):
            raise ValueError(
                f"not a time: {value!r} (a finite number of seconds or YYYY-MM-DD HH:MM:SS)"
            )
        return f
    try:
        return datetime.fromisoformat(v).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        pass
    for fmt in (_TS, "%Y-%m-%d %H:%M", "%Y-%m-%d", "%Y-%m-%dT%H:%M:%S"):
        try:
            return datetime.strptime(v, fmt).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    raise ValueError(f"not a time: {value!r} (use YYYY-MM-DD[ HH:MM:SS] or seconds)")


def _num(row: dict, col: str, kind: Callable = float, minimum: float | None = None):
    raw = row.get(col)
    if raw is None or str(raw).strip() == "":
        raise ValueError(f"column {col!r} is missing or empty")
    try:
        f = float(raw)
        if not math.isfinite(f):
            raise ValueError
        v = kind(f) if kind is int else kind(raw)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"column {col!r}: {raw!r} is not a finite number") from None
    if minimum is not None and v < minimum:
        raise ValueError(f"column {col!r}: {raw!r} is below {minimum}")
    return v


def _philly(row: dict, line: int) -> Job:
    vc = (row.get("cluster") or "").strip()
    if not vc:
        raise ValueError("column 'cluster' is empty")
    return Job(
        job_id=line - 1,
        user=vc,
        account=vc,
        num_gpus=_num(row, "num_gpus", int, 1),
        submit_time=parse_time(row.get("timestamp") or ""),
        duration=_num(row, "duration", float, 0),
    )


def _steps(times: str, values: str) -> tuple[tuple[float, float], ...]:
    ts = [float(x) * 60.0 for x in times.split("-") if x]
    vs = [float(x) for x in values.split("-") if x]
    if len(ts) != len(vs):
        raise ValueError(
            f"expect_time_list {times!r} and expect_value_list {values!r} differ in length"
        )
    return tuple(zip(ts, vs))


def _chronus(row: dict, line: int) -> Job | None:
    if str(row.get("num_gpu", "")).strip() == "0":
        return None  # CPU-only rows (a few in the Chronus traces) are not GPU jobs: skipped
    submit = _num(row, "submit_time", float, 0) * 60.0
    kind = (row.get("job_type") or "").strip()
    user = (row.get("user") or "").strip()
    job = Job(
        job_id=_num(row, "job_id", int, 0),
        user=user,
        account=user,
        name=(row.get("model_name") or "").strip(),
        num_gpus=_num(row, "num_gpu", int, 1),
        submit_time=submit,
        duration=_num(row, "duration", float, 0) * 60.0,
        tags={"job_type": kind},
    )
    if kind == "strict":
        steps = _steps(row.get("expect_time_list") or "", row.get("expect_value_list") or "")
        if not steps:
            raise ValueError("strict job without expect_time_list")
        job.deadline = submit + steps[0][0]
        job.soft_deadlines = ((job.deadline, steps[0][1]),)
    elif kind == "soft":
        steps = _steps(row.get("expect_time_list") or "", row.get("expect_value_list") or "")
        job.soft_deadlines = tuple((submit + t, v) for t, v in steps)
    elif kind != "best":
        raise ValueError(f"column 'job_type': {kind!r}; allowed: strict, soft, best")
    if kind != "best":
        # Chronus profiles a deadline job's iteration time before admitting it, so its declared
        # run time (our time limit) is its iterations × that time: the trace duration.
        job.time_limit = job.duration
    return job


def _tiresias(row: dict, line: int) -> Job:
    return Job(
        job_id=_num(row, "job_id", int, 0),
        user="default",
        account="default",
        name=(row.get("model_name") or "").strip(),
        num_gpus=_num(row, "num_gpu", int, 1),
        submit_time=_num(row, "submit_time", float, 0),
        duration=_num(row, "duration", float, 0),
    )


def _plain(row: dict, line: int) -> Job:
    account = (row.get("account") or row.get("user") or "default").strip()
    job = Job(
        job_id=int(_num(row, "job_id", int, 0)) if row.get("job_id") else line - 1,
        user=(row.get("user") or account).strip(),
        account=account,
        name=(row.get("name") or "").strip(),
        num_gpus=_num(row, "num_gpus", int, 1),
        submit_time=parse_time(row.get("submit_time") or ""),
        duration=_num(row, "duration", float, 0),
    )
    if row.get("time_limit"):
        job.time_limit = _num(row, "time_limit", float, 1)
    if row.get("deadline"):
        job.deadline = parse_time(row["deadline"])
    if row.get("job_class"):
        job.job_class = JobClass.parse(row["job_class"])
    if row.get("checkpointable"):
        job.checkpointable = row["checkpointable"].strip() not in ("0", "false", "no")
    return job


def _openb(row: dict, line: int) -> Job | None:
    if _num(row, "num_gpu", int, 0) == 0 or not (row.get("scheduled_time") or "").strip():
        return None  # CPU tasks, and tasks never scheduled (no run time to replay)
    start = _num(row, "scheduled_time", float, 0)
    end = _num(row, "deletion_time", float, 0)
    if end < start:
        raise ValueError(f"column 'deletion_time': {end:g} is before scheduled_time {start:g}")
    qos = (row.get("qos") or "").strip() or "default"
    spec = tuple(
        dict.fromkeys(t.strip() for t in (row.get("gpu_spec") or "").split("|") if t.strip())
    )
    job = Job(
        job_id=line - 1,
        user=qos,
        account=qos,
        name=(row.get("name") or "").strip(),
        num_gpus=_num(row, "num_gpu", int, 1),
        submit_time=_num(row, "creation_time", float, 0),
        duration=end - start,
        accepted_types=spec,
    )
    return job


_READERS: dict[str, tuple[Callable[[dict, int], Job], tuple[str, ...]]] = {
    "philly": (_philly, ("timestamp", "duration", "num_gpus", "cluster")),
    "chronus": (_chronus, ("job_id", "user", "num_gpu", "submit_time", "duration", "job_type")),
    "tiresias": (_tiresias, ("job_id", "num_gpu", "submit_time", "duration")),
    "csv": (_plain, ("submit_time", "duration", "num_gpus")),
    "openb": (
        _openb,
        ("name", "num_gpu", "gpu_spec", "qos", "creation_time", "deletion_time", "scheduled_time"),
    ),
}


def read_text(path: str | Path) -> str:
    """The whole file as UTF-8 text; one clear TraceError when it is missing, empty or not text."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise TraceError(f"{p}: cannot read the trace: {e.strerror or e}") from None
    if not data.strip():
        raise TraceError(f"{p}: the file is empty")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise TraceError(
            f"{p}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x}); "
            f"convert it, e.g. iconv -f latin1 -t utf-8"
        ) from None


def read_history(
    path: str | Path,
    fmt: str,
    *,
    keep_cpu: bool = False,
    skip_bad: bool = False,
    group: str = "account",
):
    """A Slurm / Helios export (``HISTORY_FORMATS``) → (jobs, ImportStats)."""
    from .history import READERS

    if group not in ("account", "partition"):
        raise TraceError(f"group by {group!r}; allowed: account, partition")
    return READERS[fmt](
        read_text(path), str(path), keep_cpu=keep_cpu, skip_bad=skip_bad, group=group
    )


def guess_format(head: str, exclude: str = "") -> str | None:
    """The trace format whose header the start of a file looks like (for a hint), or None."""
    text = head.lstrip()
    first = text.splitlines()[0] if text else ""
    guesses = []
    if text.startswith("{") and '"jobs"' in text:
        guesses.append("sacct-json")
    if "|" in first and {"JobID", "Submit"} <= set(first.split("|")):
        guesses.append("sacct")
    columns = {c.strip() for c in first.split(",")}
    for name, (_, required) in _READERS.items():
        if set(required) <= columns:
            guesses.append(name)
    if {"job_id", "gpu_num", "submit_time"} <= columns:
        guesses.append("helios")
    guesses = [g for g in guesses if g != exclude]
    return guesses[0] if guesses else None


def iter_trace(path: str | Path, fmt: str) -> Iterator[Job]:
    if fmt in HISTORY_FORMATS:
        yield from read_history(path, fmt)[0]
        return
    if fmt not in _READERS:
        raise TraceError(f"unknown trace format {fmt!r}; allowed: {', '.join(FORMATS)}")
    reader, required = _READERS[fmt]
    p = Path(path)
    with io.StringIO(read_text(p), newline="") as fh:
        rows = csv.DictReader(fh)
        missing = [c for c in required if c not in (rows.fieldnames or [])]
        if missing:
            hint = guess_format(fh.getvalue()[:4096], exclude=fmt)
            raise TraceError(
                f"{p}:1: not a {fmt} trace: missing column(s) {', '.join(missing)}"
                + (f"; it looks like --format {hint}" if hint else "")
            )
        for row in rows:
            line = rows.line_num
            try:
                job = reader(row, line)
            except ValueError as e:
                raise TraceError(f"{p}:{line}: {e}") from None
            if job is not None:
                util = (row.get(UTIL_TAG) or "").strip()
                if util:
                    job.tags = {**job.tags, UTIL_TAG: _util_text(util, p, line)}
                yield job


def _util_text(value: str, p: Path, line: int) -> str:
    try:
        parse_profile(value)
        return value
    except ValueError as e:
        raise TraceError(f"{p}:{line}: column {UTIL_TAG!r}: {e}") from None


def read_utilisation(path: str | Path) -> dict[int, str]:
    """A join file ``job_id,gpu_util`` (CSV with a header) → {job id: validated utilisation text}."""
    p = Path(path)
    try:
        fh = p.open(newline="", encoding="utf-8")
    except OSError as e:
        raise TraceError(f"{p}: cannot read the utilisation file: {e.strerror or e}") from None
    out: dict[int, str] = {}
    with fh:
        rows = csv.DictReader(fh)
        missing = [c for c in ("job_id", UTIL_TAG) if c not in (rows.fieldnames or [])]
        if missing:
            raise TraceError(
                f"{p}:1: not a utilisation file: missing column(s) {', '.join(missing)} "
                f"(expected a header job_id,{UTIL_TAG})"
            )
        for row in rows:
            line = rows.line_num
            try:
                job_id = _num(row, "job_id", int, 0)
            except ValueError as e:
                raise TraceError(f"{p}:{line}: {e}") from None
            if job_id in out:
                raise TraceError(f"{p}:{line}: column 'job_id': {job_id} appears twice")
            util = (row.get(UTIL_TAG) or "").strip()
            if util:
                out[job_id] = _util_text(util, p, line)
    return out


def attach_utilisation(jobs: list[Job], by_id: dict[int, str]) -> int:
    """Give each job the join file's utilisation (replacing a column value); returns how many matched."""
    matched = 0
    for j in jobs:
        if j.job_id in by_id:
            j.tags = {**j.tags, UTIL_TAG: by_id[j.job_id]}
            matched += 1
    return matched


def read_trace(
    path: str | Path, fmt: str, start: float | None = None, end: float | None = None
) -> list[Job]:
    """All jobs of the trace submitted in ``[start, end)`` (bounds optional), in file order."""
    out = []
    for job in iter_trace(path, fmt):
        if start is not None and job.submit_time < start:
            continue
        if end is not None and job.submit_time >= end:
            continue
        out.append(job)
    return out


def read_cluster_sizes(path: str | Path) -> dict[str, int]:
    """``vc,node num`` CSV (Helios ``philly_vc.csv``) → {vc: nodes}."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise TraceError(f"{p}: cannot read the VC sizes: {e.strerror or e}") from None
    out: dict[str, int] = {}
    for i, line in enumerate(lines, 1):
        parts = [x.strip() for x in line.split(",")]
        if i == 1 and not parts[-1].isdigit():
            continue
        if len(parts) != 2 or not parts[1].isdigit() or int(parts[1]) < 1:
            raise TraceError(f"{p}:{i}: expected 'vc,nodes' with nodes ≥ 1, got {line!r}")
        out[parts[0]] = int(parts[1])
    return out


def derive_batches(jobs: Sequence[Job], gap_s: float) -> int:
    """Tag each job with the burst it belongs to, as a job array would (in place; returns how
    many bursts). A trace without arrays (Philly: no user, no job name) shows a burst as jobs
    of one account asking the same GPU count, each submitted within ``gap_s`` seconds of the
    one before: such a job joins the previous one's burst, any other starts its own. Jobs
    that carry an array job id keep it (it names their batch). Uses only submit times, so the
    tag is known when a job is submitted; the history learner's ``batch`` key reads it."""
    if not gap_s >= 0:
        raise ValueError(f"burst gap must be 0 or more seconds, got {gap_s}")
    last: dict[tuple[str, int], tuple[float, str]] = {}
    bursts = 0
    for job in sorted(jobs, key=lambda j: (j.submit_time, j.job_id)):
        if job.array_job_id is not None:
            continue
        k = (job.account, job.num_gpus)
        prev = last.get(k)
        if prev is not None and job.submit_time - prev[0] <= gap_s:
            batch = prev[1]
        else:
            bursts += 1
            batch = f"burst:{job.account}:{job.num_gpus}:{job.job_id}"
        last[k] = (job.submit_time, batch)
        job.tags = {**job.tags, BATCH_TAG: batch}
    return bursts
