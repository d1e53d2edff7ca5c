"""A centre's own history as a trace: Slurm accounting (``sacct --json``, ``sacct -P``) and
Helios-style CSV exports. Pure parsing: text in, :class:`~slurm_dl.core.model.Job` objects and
counts out.

What real accounting holds, and what becomes of it:

* job steps (``.batch``, ``.extern``, ``.0``, …) are folded into their job (JSON nests them;
  ``sacct -P`` prints them as rows ``JOBID.STEP``, which are skipped);
* array tasks are jobs of their own (``123_4``; the JSON's own ``job_id``); a pending array
  record (``123_[5-9]``) never ran and is counted as not started;
* a requeued job (several records with one job id, ``sacct --duplicates``) is one job: the
  first submission, the first start, the run times added up;
* a job cancelled (or otherwise ended) before it started is counted, not replayed as work;
  one still pending or running is counted as unfinished;
* GPUs: ``AllocTRES`` (``gres/gpu=N``; typed ``gres/gpu:TYPE=N`` when untyped is absent),
  else ``ReqTRES``; CPU-only jobs are dropped unless ``keep_cpu`` (then they take 0 GPUs);
* the group (account in the simulator: fair share, ρ) is the Slurm account, or the partition
  with ``group="partition"``;
* times: epoch seconds in JSON; ``sacct -P`` prints local time without a zone, so export with
  ``TZ=UTC`` (a time with an explicit offset is honoured);
* what the job_submit filter decided, from its tag in the admin comment (JSON
  ``comment.administrator``, ``sacct -P`` field ``AdminComment``): the job's class, its deadline
  and whether it opted in to preemption (``ckpt``). A job without a tag did not pass the filter
  and did not opt in: the replay never preempts it, as the prioritizer would not. Helios CSV
  carries no such record: its jobs are taken as opted in, like the public traces'.

A record that cannot be read raises :class:`~slurm_dl.core.errors.TraceError` naming the line (or the
JSON array index) and the field; with ``skip_bad`` it is skipped and counted instead.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable

from ...core.errors import TraceError
from ...core.model import Job
from ...core.tags import parse_tag

SACCT_FIELDS = (
    "JobID",
    "JobIDRaw",
    "User",
    "Account",
    "Partition",
    "JobName",
    "State",
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "Timelimit",
    "AllocTRES",
    "ReqTRES",
    "AdminComment",
    "ConsumedEnergyRaw",
)
SACCT_COMMAND = "TZ=UTC sacct -a -P --duplicates -S 2024-01-01 -E now -o " + ",".join(SACCT_FIELDS)
SACCT_JSON_COMMAND = "sacct -a --duplicates -S 2024-01-01 -E now --json"
HELIOS_FIELDS = (
    "job_id",
    "user",
    "vc",
    "jobname",
    "gpu_num",
    "cpu_num",
    "node_num",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
)


@dataclass
class ImportStats:
    records: int = 0  # job records read (steps not counted)
    jobs: int = 0  # jobs replayed
    steps_folded: int = 0
    requeue_records_merged: int = 0
    array_tasks: int = 0
    not_started: int = 0  # cancelled / failed before they started
    unfinished: int = 0  # still pending or running at export time
    cpu_only_dropped: int = 0
    bad_skipped: int = 0
    bad_examples: list[str] = field(default_factory=list)
    tagged: int | None = None  # jobs with the filter's tag (None: the format records none)
    opted_in: int | None = None  # of the jobs replayed, those that opted in to preemption
    opt_in_note: str = ""
    energy_jobs: int = 0  # jobs replayed with Slurm's ConsumedEnergyRaw
    energy_joules: float = 0.0  # ... their sum (node-level: whole nodes, see _energy)

    def describe(self) -> str:
        parts = [f"{self.jobs} jobs replayed from {self.records} records"]
        for n, what in (
            (self.steps_folded, "steps folded into their jobs"),
            (self.array_tasks, "array tasks"),
            (self.requeue_records_merged, "requeue records merged"),
            (self.not_started, "ended before starting (not replayed)"),
            (self.unfinished, "still pending or running (not replayed)"),
            (self.cpu_only_dropped, "CPU-only dropped"),
            (self.bad_skipped, "bad records skipped"),
        ):
            if n:
                parts.append(f"{n} {what}")
        if self.opted_in is not None:
            parts.append(f"{self.opted_in} opted in to preemption")
        if self.opt_in_note:
            parts.append(self.opt_in_note)
        if self.energy_jobs:
            kwh = self.energy_joules / 3.6e6
            parts.append(f"{self.energy_jobs} with Slurm's node energy ({kwh:,.1f} kWh)")
        return "; ".join(parts)


class _Bad(ValueError):
    def __init__(self, fld: str, msg: str):
        super().__init__(f"field {fld!r}: {msg}")


# --- small parsers ---------------------------------------------------------------------------
_UNKNOWN_ENERGY = 2**63  # Slurm's NO_VAL64 and kin: no reading


def _energy(raw: str) -> float | None:
    """``ConsumedEnergyRaw`` in joules: Slurm's acct_gather_energy reading for the job's whole
    nodes (IPMI/RAPL; meaningful for exclusive jobs only). Empty, 0 or Slurm's no-value: not
    recorded (None), not zero."""
    raw = (raw or "").strip()
    if not raw:
        return None
    try:
        joules = float(raw)
    except ValueError:
        raise _Bad("ConsumedEnergyRaw", f"{raw!r} is not joules") from None
    if not math.isfinite(joules) or joules < 0:
        raise _Bad("ConsumedEnergyRaw", f"{raw!r} is not joules")
    return joules if 0 < joules < _UNKNOWN_ENERGY else None


_TRES_GPU = re.compile(r"gres/gpu(?::([^=,]+))?=(\d+)")


def gpus_from_tres(text: str) -> tuple[int, str | None]:
    """``gres/gpu=2,gres/gpu:a100=2`` → (2, 'a100'); typed counts add up when untyped is absent."""
    untyped, typed, gtype = None, 0, None
    for m in _TRES_GPU.finditer(text or ""):
        if m.group(1) is None:
            untyped = int(m.group(2))
        else:
            typed += int(m.group(2))
            gtype = gtype or m.group(1)
    return (untyped if untyped is not None else typed), gtype


def _tres_list(items: Any, fld: str) -> tuple[int, str | None]:
    if not items:
        return 0, None
    if not isinstance(items, list):
        raise _Bad(fld, "expected a list of TRES")
    untyped, typed, gtype = None, 0, None
    for t in items:
        if not isinstance(t, dict) or t.get("type") != "gres":
            continue
        name = str(t.get("name") or "")
        if name != "gpu" and not name.startswith("gpu:"):
            continue
        count = _number(t.get("count"), fld)
        if count is None or count < 0:
            raise _Bad(fld, f"bad GPU count {t.get('count')!r}")
        if name == "gpu":
            untyped = int(count)
        else:
            typed += int(count)
            gtype = gtype or name[4:]
    return (untyped if untyped is not None else typed), gtype


def _number(v: Any, fld: str) -> float | None:
    """A JSON number, or Slurm's newer ``{"set": bool, "infinite": bool, "number": N}``;
    None when unset or infinite."""
    if isinstance(v, dict):
        if not v.get("set", True) or v.get("infinite", False):
            return None
        v = v.get("number")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Bad(fld, f"{v!r} is not a number")
    if not math.isfinite(v):
        raise _Bad(fld, f"{v!r} is not a finite number")
    return float(v)


def _state(v: Any) -> str:
    """22.05: ``{"current": "COMPLETED"}`` or a string; newer: ``{"current": ["COMPLETED"]}``."""
    if isinstance(v, dict):
        v = v.get("current")
    if isinstance(v, list):
        v = v[0] if v else ""
    return str(v or "").split()[0].upper() if v else ""


def parse_clock(text: str, fld: str) -> float | None:
    """sacct's ``2024-01-02T03:04:05`` (UTC unless it carries an offset) → epoch seconds;
    ``Unknown`` / ``None`` / empty → None."""
    t = (text or "").strip()
    if not t or t in ("Unknown", "None", "N/A"):
        return None
    try:
        d = datetime.fromisoformat(t.replace(" ", "T", 1) if "T" not in t else t)
    except ValueError:
        raise _Bad(fld, f"{t!r} is not a time (YYYY-MM-DDTHH:MM:SS)") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return d.timestamp()


def parse_duration(text: str, fld: str) -> float | None:
    """Slurm's ``[DD-]HH:MM:SS`` / ``MM:SS`` / minutes → seconds; ``UNLIMITED`` → None."""
    t = (text or "").strip()
    if not t or t.upper() in ("UNLIMITED", "PARTITION_LIMIT", "INVALID"):
        return None
    days = 0
    if "-" in t:
        d, _, t = t.partition("-")
        if not d.isdigit():
            raise _Bad(fld, f"{text!r} is not a duration")
        days = int(d)
    parts = t.split(":")
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        raise _Bad(fld, f"{text!r} is not a duration") from None
    if any(not math.isfinite(x) or x < 0 for x in nums) or len(nums) > 3:
        raise _Bad(fld, f"{text!r} is not a duration")
    if len(nums) == 1:
        secs = nums[0] * 60.0  # plain minutes (Timelimit)
    elif len(nums) == 2:
        secs = nums[0] * 60 + nums[1]
    else:
        secs = nums[0] * 3600 + nums[1] * 60 + nums[2]
    return days * 86400.0 + secs


# --- the common record → job step ------------------------------------------------------------
@dataclass
class _Rec:
    key: str  # job id (array tasks: their own id)
    user: str
    account: str
    partition: str
    name: str
    state: str
    submit: float | None
    start: float | None
    end: float | None
    elapsed: float | None
    limit: float | None
    gpus: int
    gpu_type: str | None
    array: bool = False
    admin_comment: str | None = None  # None: the format has no such field
    energy_j: float | None = None  # ConsumedEnergyRaw (None: not recorded)


def _fold(recs: Iterable[_Rec], stats: ImportStats, keep_cpu: bool, group: str) -> list[Job]:
    by_key: dict[str, list[_Rec]] = {}
    for r in recs:
        by_key.setdefault(r.key, []).append(r)
    out: list[Job] = []
    used: set[int] = set()
    counter = [max([int(k) for k in by_key if k.isdigit()] + [0])]

    def next_id() -> int:
        counter[0] += 1
        return counter[0]

    for key, rs in by_key.items():
        stats.requeue_records_merged += len(rs) - 1
        started = [r for r in rs if r.start is not None and r.start > 0]
        if not started:
            if any(r.end is None and r.state in ("PENDING", "REQUEUED", "") for r in rs):
                stats.unfinished += 1
            else:
                stats.not_started += 1
            continue
        if any(r.end is None or r.end <= 0 for r in started):
            stats.unfinished += 1
            continue
        first = min(rs, key=lambda r: r.submit or 0.0)
        run = sum(
            r.elapsed if r.elapsed is not None else max(0.0, r.end - r.start) for r in started
        )
        gpus = max(r.gpus for r in rs)
        if gpus <= 0 and not keep_cpu:
            stats.cpu_only_dropped += 1
            continue
        if first.array:
            stats.array_tasks += 1
        last = rs[-1]
        grp = (last.partition if group == "partition" else last.account) or "default"
        jid = int(key) if key.isdigit() and int(key) not in used else next_id()
        used.add(jid)
        job = Job(
            job_id=jid,
            user=last.user or grp,
            account=grp,
            name=last.name,
            num_gpus=max(0, gpus),
            gpu_type=last.gpu_type,
            partition=last.partition,
            submit_time=first.submit if first.submit is not None else min(r.start for r in started),
            duration=run,
            time_limit=last.limit,
            tags={
                "recorded_start": repr(min(r.start for r in started)),
                "recorded_end": repr(max(r.end for r in started)),
                "slurm_job_id": key,
                "slurm_account": last.account,
                "state": last.state,
            },
        )
        if last.admin_comment is not None:
            _apply_tag(job, last.admin_comment, stats)
        measured = [r.energy_j for r in started if r.energy_j is not None]
        if measured:
            job.tags["consumed_energy_j"] = repr(sum(measured))
            stats.energy_jobs += 1
            stats.energy_joules += sum(measured)
        out.append(job)
    out.sort(key=lambda j: (j.submit_time, j.job_id))
    stats.jobs = len(out)
    if stats.tagged is not None:
        stats.opted_in = sum(1 for j in out if j.checkpointable)
    return out


def _apply_tag(job: Job, comment: str, stats: ImportStats) -> None:
    """What the filter decided about ``job``, from its admin-comment tag; no tag: it did not pass
    the filter, so it did not opt in to preemption (the prioritizer never preempts it)."""
    stats.tagged = stats.tagged or 0
    tag = parse_tag(comment)
    if tag is None:
        job.checkpointable = False
        return
    stats.tagged += 1
    job.job_class = tag.job_class
    job.checkpointable = tag.checkpointable
    job.signal_target = tag.signal_target
    if tag.checkpointable:
        job.requeue = True  # the filter turns requeue on for jobs that opt in
    if tag.deadline is not None:
        job.deadline = float(tag.deadline)
    elif tag.soft_deadlines:
        job.soft_deadlines = tuple((float(t), v) for t, v in tag.soft_deadlines)
    if tag.gpu_types:
        job.accepted_types = tuple(tag.gpu_types)


def _bad(stats: ImportStats, skip_bad: bool, where: str, err: Exception) -> None:
    if not skip_bad:
        raise TraceError(f"{where}: {err}")
    stats.bad_skipped += 1
    if len(stats.bad_examples) < 5:
        stats.bad_examples.append(f"{where}: {err}")


# --- sacct --json ----------------------------------------------------------------------------
def _json_rec(j: Any) -> _Rec:
    if not isinstance(j, dict):
        raise _Bad("jobs[]", "a job record must be an object")
    jid = j.get("job_id")
    if not isinstance(jid, int) or isinstance(jid, bool):
        raise _Bad("job_id", f"{jid!r} is not a job id")
    t = j.get("time") or {}
    if not isinstance(t, dict):
        raise _Bad("time", "expected an object")
    assoc = j.get("association") or {}
    tres = j.get("tres") or {}
    g, gt = _tres_list(tres.get("allocated"), "tres.allocated")
    if g == 0:
        g, gt = _tres_list(tres.get("requested"), "tres.requested")
    arr = j.get("array") or {}
    task = _number(arr.get("task_id"), "array.task_id") if isinstance(arr, dict) else None
    limit = _number(t.get("limit"), "time.limit")
    submit = _number(t.get("submission"), "time.submission")
    if submit is None:
        raise _Bad("time.submission", "missing")
    start = _number(t.get("start"), "time.start")
    end = _number(t.get("end"), "time.end")
    elapsed = _number(t.get("elapsed"), "time.elapsed")
    comment = j.get("comment")
    admin = str(comment.get("administrator") or "") if isinstance(comment, dict) else ""
    return _Rec(
        key=str(jid),
        user=str(j.get("user") or assoc.get("user") or ""),
        account=str(j.get("account") or assoc.get("account") or ""),
        partition=str(j.get("partition") or ""),
        name=str(j.get("name") or ""),
        state=_state(j.get("state")),
        submit=submit,
        start=start if start else None,
        end=end if end else None,
        elapsed=elapsed,
        limit=None if limit is None else limit * 60.0,
        gpus=g,
        gpu_type=gt,
        array=task is not None,
        admin_comment=admin,
    )


def read_sacct_json(
    text: str,
    source: str,
    *,
    keep_cpu: bool = False,
    skip_bad: bool = False,
    group: str = "account",
) -> tuple[list[Job], ImportStats]:
    stats = ImportStats()
    try:
        doc = json.loads(
            text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"{c} is not allowed"))
        )
    except ValueError as e:
        raise TraceError(f"{source}: not sacct --json output: {e}") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise TraceError(f"{source}: not sacct --json output: no 'jobs' list")
    recs = []
    for i, j in enumerate(jobs):
        try:
            recs.append(_json_rec(j))
        except _Bad as e:
            _bad(stats, skip_bad, f"{source}: jobs[{i}]", e)
            continue
        stats.records += 1
        steps = j.get("steps")
        stats.steps_folded += len(steps) if isinstance(steps, list) else 0
    return _fold(recs, stats, keep_cpu, group), stats


# --- sacct -P --------------------------------------------------------------------------------
def read_sacct_text(
    text: str,
    source: str,
    *,
    keep_cpu: bool = False,
    skip_bad: bool = False,
    group: str = "account",
) -> tuple[list[Job], ImportStats]:
    stats = ImportStats()
    lines = text.splitlines()
    header = lines[0].split("|")
    missing = [f for f in ("JobID", "State", "Submit", "Start", "End") if f not in header]
    if missing:
        raise TraceError(
            f"{source}:1: not sacct -P output: missing field(s) {', '.join(missing)} "
            f"(the export command is in slurm-dl simulate --help)"
        )
    if "AdminComment" not in header:
        stats.opt_in_note = "no AdminComment field: every job taken as opted in to preemption"
    recs = []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != len(header):
            _bad(
                stats,
                skip_bad,
                f"{source}:{n}",
                ValueError(f"{len(cells)} fields, the header has {len(header)}"),
            )
            continue
        row = dict(zip(header, cells))
        jid = row["JobID"].strip()
        if "." in jid:  # a step: folded into its job
            stats.steps_folded += 1
            continue
        try:
            if not re.fullmatch(r"\d+(_(\d+|\[[^\]]*\]))?(\+\d+)?", jid):
                raise _Bad("JobID", f"{jid!r} is not a job id")
            if "[" in jid:  # an array's pending record
                stats.records += 1
                stats.unfinished += 1
                continue
            g, gt = gpus_from_tres(row.get("AllocTRES", ""))
            if g == 0:
                g, gt = gpus_from_tres(row.get("ReqTRES", ""))
            start = parse_clock(row["Start"], "Start")
            end = parse_clock(row["End"], "End")
            elapsed = (
                parse_duration(row.get("Elapsed", ""), "Elapsed") if row.get("Elapsed") else None
            )
            raw_id = (row.get("JobIDRaw") or "").strip()
            rec = _Rec(
                key=raw_id if raw_id.isdigit() else jid,
                user=row.get("User", ""),
                account=row.get("Account", ""),
                partition=row.get("Partition", ""),
                name=row.get("JobName", ""),
                state=_state(row["State"]),
                submit=parse_clock(row["Submit"], "Submit"),
                start=start,
                end=end,
                elapsed=elapsed,
                limit=parse_duration(row.get("Timelimit", ""), "Timelimit")
                if row.get("Timelimit")
                else None,
                gpus=g,
                gpu_type=gt,
                array="_" in jid,
                admin_comment=row.get("AdminComment"),
                energy_j=_energy(row.get("ConsumedEnergyRaw", "")),
            )
            if rec.submit is None:
                raise _Bad("Submit", "missing")
        except _Bad as e:
            _bad(stats, skip_bad, f"{source}:{n}", e)
            continue
        stats.records += 1
        recs.append(rec)
    return _fold(recs, stats, keep_cpu, group), stats


# --- Helios CSV ------------------------------------------------------------------------------
def read_helios(
    text: str,
    source: str,
    *,
    keep_cpu: bool = False,
    skip_bad: bool = False,
    group: str = "account",
) -> tuple[list[Job], ImportStats]:
    stats = ImportStats()
    rows = csv.DictReader(io.StringIO(text))
    missing = [
        f
        for f in ("job_id", "gpu_num", "submit_time", "start_time", "end_time", "state")
        if f not in (rows.fieldnames or [])
    ]
    if missing:
        raise TraceError(f"{source}:1: not a Helios CSV: missing column(s) {', '.join(missing)}")
    recs = []
    for row in rows:
        n = rows.line_num
        try:
            raw = (row.get("gpu_num") or "").strip()
            try:
                gf = float(raw)
                if not math.isfinite(gf) or gf < 0:
                    raise ValueError
                g = int(gf)
            except ValueError:
                raise _Bad("gpu_num", f"{raw!r} is not a GPU count") from None
            submit = parse_clock(row.get("submit_time") or "", "submit_time")
            if submit is None:
                raise _Bad("submit_time", "missing")
            start = parse_clock(row.get("start_time") or "", "start_time")
            end = parse_clock(row.get("end_time") or "", "end_time")
            dur = (row.get("duration") or "").strip()
            elapsed = None
            if dur:
                try:
                    elapsed = float(dur)
                except ValueError:
                    raise _Bad("duration", f"{dur!r} is not seconds") from None
                if not math.isfinite(elapsed) or elapsed < 0:
                    raise _Bad("duration", f"{dur!r} is not seconds")
            vc = (row.get("vc") or "").strip()
            rec = _Rec(
                key=(row.get("job_id") or "").strip() or str(n),
                user=(row.get("user") or "").strip(),
                account=vc,
                partition=vc,
                name=(row.get("jobname") or "").strip(),
                state=_state(row.get("state")),
                submit=submit,
                start=start,
                end=end,
                elapsed=elapsed,
                limit=None,
                gpus=g,
                gpu_type=None,
            )
        except _Bad as e:
            _bad(stats, skip_bad, f"{source}:{n}", e)
            continue
        stats.records += 1
        recs.append(rec)
    return _fold(recs, stats, keep_cpu, group), stats


READERS = {"sacct-json": read_sacct_json, "sacct": read_sacct_text, "helios": read_helios}
