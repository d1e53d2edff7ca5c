"""``dlsubmit status``: Slurm's view of a job plus what dlsubmit knows about its checkpoints.

At submission dlsubmit keeps a small record per job (``$SLURM_DL_STATE_DIR``, else
``$XDG_STATE_HOME/slurm-dl/jobs``, else ``~/.local/state/slurm-dl/jobs``): kind, name, output
file, absolute checkpoint directory and what a checkpoint there is called. Status joins it
with the backend's jobs, the checkpoint the job resumes from (the newest whose name matches,
as the script chooses it) and the last events the script logged in ``CKPT_DIR/.dlsubmit/events``,
and asks the prioritizer why a pending job waits when the prioritizer is installed. A running
job's GPU use comes from the gpu-agents' files when the site config names them (``gpu``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import typer

from ..core.hostlist import compress_hostlist
from ..core.model import Job
from ..core.tags import parse_tag
from .results import result_lines, results_summary, sweep_results
from .render import RenderedJob, is_checkpoint
from ..core.database_url import sqlite_path
from ..telemetry.samples import JobGpuSample
from ..core.idle.notice import SHARE_HINT_MARK, share_tip
from .gpu import OVER_SHARE_HINT, UNAVAILABLE_HINT, gpu_cell, gpu_status


def state_dir() -> Path:
    """Records per cluster: job ids repeat across clusters (one subdirectory per SLURM_CONF)."""
    if os.environ.get("SLURM_DL_STATE_DIR"):
        base = Path(os.environ["SLURM_DL_STATE_DIR"])
    else:
        base = (
            Path(os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state"))
            / "slurm-dl"
            / "jobs"
        )
    conf = os.environ.get("SLURM_CONF", "")
    return base / (hashlib.sha256(conf.encode()).hexdigest()[:12] if conf else "default")


def output_path(pattern: str, job_id: int) -> str:
    """The output file name sbatch makes of our pattern (%j job, %A array master; %a stays per task)."""
    return pattern.replace("%j", str(job_id)).replace("%A", str(job_id))


def save_record(job_id: int, job: RenderedJob, cwd: Path) -> None:
    """Remember where this job's output and checkpoints are (best effort: status works without it)."""
    ckpt = Path(job.checkpoint_dir)
    record = {
        "job_id": job_id,
        "kind": job.kind,
        "name": job.name,
        "workdir": str(cwd),
        "output": str(cwd / output_path(job.output, job_id)),
        "checkpoint_dir": str(ckpt if ckpt.is_absolute() else cwd / ckpt),
        "ckpt_globs": list(job.ckpt_globs),
        "submitted_at": time.time(),
    }
    try:
        d = state_dir()
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{job_id}.json").write_text(json.dumps(record))
    except OSError:
        pass


OLD_SCRIPT_GLOBS = ("*",)
"""A record made before the scripts knew checkpoints by name: its script takes any file."""


def record_globs(record: dict[str, Any] | None) -> tuple[str, ...]:
    """The checkpoint name patterns the job's script uses."""
    globs = (record or {}).get("ckpt_globs")
    return tuple(globs) if isinstance(globs, list) else OLD_SCRIPT_GLOBS


def load_record(job_id: int) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir() / f"{job_id}.json").read_text())
    except (OSError, ValueError):
        return None


RECORD_KEEP_S = 30 * 86400


def ended_rows(
    listed: set[int],
    only: int | None = None,
    accounting: "Callable[[list[int]], dict[int, Job] | None] | None" = None,
) -> list[dict[str, Any]]:
    """Rows for remembered jobs that Slurm no longer lists (they ended a while ago): their final
    state from ``accounting`` (sacct) where the site keeps it, else ``ENDED`` from the record."""
    d = state_dir()
    rows = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        if (
            not p.stem.isdigit()
            or int(p.stem) in listed
            or (only is not None and int(p.stem) != only)
        ):
            continue
        rec = load_record(int(p.stem))
        if rec is None:
            continue
        try:
            submitted = rec.get("submitted_at") or p.stat().st_mtime
        except OSError:
            continue
        ckpt = Path(rec["checkpoint_dir"]) if rec.get("checkpoint_dir") else None
        seen = rec.get("ended") or {}  # what status saw while Slurm still listed it
        rows.append(
            {
                "job_id": int(p.stem),
                "name": rec.get("name") or "-",
                "state": seen.get("state") or "ENDED",
                "reason": "",
                "restarts": seen.get("restarts") or 0,
                "deadline": seen.get("deadline"),
                "nodes": list(seen.get("nodes") or []),
                "kind": rec.get("kind"),
                "output": rec.get("output"),
                "checkpoint_dir": rec.get("checkpoint_dir"),
                "last_checkpoint": newest_checkpoint(ckpt, record_globs(rec)) if ckpt else None,
                "checkpoints": checkpoint_counts(ckpt, record_globs(rec)) if ckpt else None,
                "events": last_events(ckpt) if ckpt else [],
                "explain": None,
                "why": None,
                "submitted_at": seen.get("submitted_at") or submitted,
                "started_at": seen.get("started_at"),
                "telemetry": False,
                "gpu": None,
            }
        )
        if rec.get("kind") == "sweep":
            rows[-1]["results"] = sweep_results(rec.get("checkpoint_dir"), rec.get("output"))
    known = accounting([r["job_id"] for r in rows]) if accounting is not None and rows else None
    for r in rows:
        job = (known or {}).get(r["job_id"])
        if job is not None and job.name == r["name"]:  # the same job, not a reused id
            r.update(
                state=job.state.value,
                restarts=job.restarts,
                nodes=list(job.nodes),
                started_at=job.start_time,
                submitted_at=job.submit_time or r["submitted_at"],
                source="sacct",
            )
    return rows


def remember_ended(rows: list[dict[str, Any]]) -> None:
    """Keep an ended job's final state, submit and start times, restarts and deadline in its
    record while Slurm still lists it, so the job reads the same once Slurm forgets it (where
    the site keeps no accounting). Best effort, as :func:`save_record`."""
    for r in rows:
        if r["state"] in ACTIVE or r["state"] == "ENDED" or r.get("tasks"):
            continue
        rec = load_record(r["job_id"])
        if rec is None or rec.get("name") != r["name"]:
            continue
        seen = {k: r.get(k) for k in ("state", "submitted_at", "started_at", "restarts")}
        seen.update(deadline=r.get("deadline"), nodes=list(r.get("nodes") or []))
        if rec.get("ended") == seen:
            continue
        try:
            (state_dir() / f"{r['job_id']}.json").write_text(json.dumps({**rec, "ended": seen}))
        except OSError:
            pass


def forget_missing(known: set[int]) -> None:
    """Records of jobs Slurm no longer lists are kept for 30 days (``status --all``), then dropped."""
    d = state_dir()
    if not d.is_dir():
        return
    for p in d.glob("*.json"):
        try:
            if (
                p.stem.isdigit()
                and int(p.stem) not in known
                and time.time() - p.stat().st_mtime > RECORD_KEEP_S
            ):
                p.unlink()
        except OSError:
            pass


def _checkpoints(ckpt_dir: Path, globs: tuple[str, ...]) -> tuple[list[Path], int]:
    """The checkpoints in ``ckpt_dir`` and how many other (not hidden) entries it holds."""
    try:
        entries = [p for p in ckpt_dir.iterdir() if not p.name.startswith(".")]
    except OSError:
        return [], 0
    ckpts = [p for p in entries if is_checkpoint(p.name, globs)]
    return ckpts, len(entries) - len(ckpts)


def newest_checkpoint(ckpt_dir: Path, globs: tuple[str, ...] = OLD_SCRIPT_GLOBS) -> str | None:
    """The checkpoint the job's script makes RESUME_FROM: the newest entry whose name matches
    ``globs``, never a hidden one or a *.tmp/*.partial/*.incomplete."""
    ckpts, _ = _checkpoints(ckpt_dir, globs)
    if not ckpts:
        return None

    def mtime(p: Path) -> int:
        try:
            return p.stat().st_mtime_ns
        except OSError:
            return 0

    return str(max(ckpts, key=mtime))


def resume_checkpoint(job_id: int, name: str | None) -> str | None:
    """The name of the checkpoint this user's dlsubmit job ``job_id`` resumes from at its next
    start, "" when it has none yet; None when there is no record of it here (not submitted
    with dlsubmit, by another user, or the id was reused by a job of another name)."""
    record = load_record(job_id)
    if record is None or record.get("name") != name or not record.get("checkpoint_dir"):
        return None
    path = newest_checkpoint(Path(record["checkpoint_dir"]), record_globs(record))
    return Path(path).name if path else ""


def checkpoint_counts(ckpt_dir: Path, globs: tuple[str, ...]) -> dict[str, int]:
    """How many checkpoints ``ckpt_dir`` holds, and how many other files."""
    ckpts, others = _checkpoints(ckpt_dir, globs)
    return {"checkpoints": len(ckpts), "others": others}


def own_events(lines: list[str], job_id: int, sweep: bool = False, n: int = 3) -> list[str]:
    """The last ``n`` events of this job: runs with the same name share a checkpoint directory,
    and its events file, so another job's lines are left out (a sweep's tasks have ids of
    their own: all kept)."""
    if not sweep:
        lines = [ln for ln in lines if f" job={job_id} " in ln or " job=" not in ln]
    return lines[-n:]


def last_events(ckpt_dir: Path, n: int = 3) -> list[str]:
    try:
        lines = (ckpt_dir / ".dlsubmit" / "events").read_text(errors="replace").splitlines()
    except OSError:
        return []
    return lines[-n:]


def prioritizer_explain(
    job_id: int,
    database_url: str | None,
    estimate: float | None = None,
    state: str = "PENDING",
    resumes_from: str | None = None,
) -> tuple[str | None, str | None]:
    """The prioritizer's explanation of a job (``slurm-dl explain``'s text) and its one-line
    summary, read from the store at ``database_url``; (None, None) when there is no data: the
    prioritizer is not installed, its store does not exist, or it has not seen the job yet."""
    if not database_url:
        return None, None
    path = sqlite_path(database_url)
    if path is not None and (not path or not Path(path).exists()):
        return None, None
    try:
        from ..explain.query import NoRecord, gather, payload
        from ..store import Store
    except ImportError:
        return None, None
    try:
        doc = payload(gather(Store(database_url, create=False), job_id), live=False)
    except NoRecord:
        return None, None
    except Exception:  # noqa: BLE001 - a broken or foreign store must not break `dlsubmit status`
        return None, None
    return _texts(doc, estimate, state, resumes_from)


def _texts(
    doc: dict[str, Any], estimate: float | None, state: str, resumes_from: str | None = None
) -> tuple[str | None, str | None]:
    """(explain's text, the one-line summary) of a :func:`~slurm_dl.explain_query.payload`
    document; (None, None) for one from before the job's current state (stale)."""
    from ..explain.query import render_text
    from ..explain.view import estimate_words, one_line, with_resume

    if doc.get("state") != state or "tiers" not in doc:
        return None, None
    doc = with_resume(doc, resumes_from)
    if str(doc.get("live", "")).startswith("not asked"):
        doc = {**doc, "live": "ok"}  # Slurm's estimate comes from the caller
    if estimate and not (doc.get("estimated_start") or {}).get("at"):
        doc = {
            **doc,
            "estimated_start": estimate_words({"at": estimate, "source": "slurm"}, time.time()),
        }
    return render_text(doc), one_line(doc)


class Explainer:
    """Asks the prioritizer about a job the way ``slurm-dl explain`` does: its store where it
    can be read here, else its explain endpoint. ``unavailable`` says in one line why it
    could not be asked (then it stops asking)."""

    def __init__(self, site) -> None:
        self.site = site
        self.unavailable: str | None = None
        self.stores: dict = {}

    def __call__(
        self,
        job_id: int,
        estimate: float | None = None,
        state: str = "PENDING",
        detail: bool = False,
        resumes_from: str | None = None,
    ) -> tuple[str | None, str | None]:
        from ..core.errors import SlurmDLError
        from ..explain.query import NeitherAnswers, NoRecord, NoWayToAsk, explanation

        if self.unavailable:
            return None, None
        try:
            doc = explanation(self.site, job_id, live=detail, stores=self.stores)
        except NoRecord:
            return None, None
        except NoWayToAsk:
            self.unavailable = (
                "the prioritizer's view is not available here (its database cannot be read "
                "and the site has no explain endpoint): Slurm's reason is shown"
            )
            return None, None
        except NeitherAnswers:
            self.unavailable = (
                "the prioritizer's view is not available here (its database cannot be read "
                "and its explain endpoint did not answer): Slurm's reason is shown"
            )
            return None, None
        except SlurmDLError as e:
            self.unavailable = f"the prioritizer could not be asked: {str(e).splitlines()[0]}"
            return None, None
        except Exception:  # noqa: BLE001 - a broken or foreign store must not break `dlsubmit status`
            return None, None
        return _texts(doc, estimate, state, resumes_from)


def describe_jobs(
    jobs: Iterable[Job],
    job_id: int | None,
    explainer: "Explainer | str | None" = None,
    gpu_samples: list[JobGpuSample] | None = None,
    estimates: dict[int, float] | None = None,
    gpu_unavailable: bool = False,
) -> list[dict[str, Any]]:
    """One row per job; ``explainer`` asks the prioritizer (an :class:`Explainer`, or a store's
    URL); ``gpu_samples`` (the agents' files; None: telemetry not configured) give running jobs
    their ``gpu`` entry; ``estimates`` are Slurm's expected starts of pending jobs;
    ``gpu_unavailable``: telemetry is configured but its files cannot be read here."""
    rows = []
    jobs = list(jobs)
    arrays: dict[int, list[Job]] = {}
    for job in jobs:
        if job.array_job_id is not None:
            arrays.setdefault(job.array_job_id, []).append(job)
    shown_arrays: set[int] = set()
    for job in jobs:
        tasks = None
        if job.array_job_id is not None and (
            job_id is None or job_id == job.array_job_id == job.job_id
        ):
            # A sweep: one row for all its tasks, under the array's id, summarised by their states.
            if job.array_job_id in shown_arrays:
                continue
            shown_arrays.add(job.array_job_id)
            members = arrays[job.array_job_id]
            tasks = task_counts(members)
            job = next((j for j in members if j.job_id == job.array_job_id), job)
            if job.job_id != job.array_job_id:
                job = dataclasses.replace(job, job_id=job.array_job_id)
        record = load_record(job.job_id)
        if record is not None and record.get("name") != job.name:
            record = None  # the id was reused (another cluster or a reset one): not our job
        if job_id is not None:
            if job.job_id != job_id:
                continue
        elif record is None:
            continue
        row: dict[str, Any] = {
            "job_id": job.job_id,
            "name": job.name,
            "state": job.state.value,
            "reason": job.state_reason,
            "restarts": job.restarts,
            "deadline": job_deadline(job),
            "nodes": list(job.nodes),
            "kind": record and record.get("kind"),
            "output": record and record.get("output"),
            "checkpoint_dir": record and record.get("checkpoint_dir"),
            "last_checkpoint": None,
            "checkpoints": None,
            "events": [],
            "explain": None,
            "why": None,
            "submitted_at": job.submit_time or (record and record.get("submitted_at")) or None,
            "started_at": job.start_time if job.running or job.state.finished else None,
            "telemetry": gpu_samples is not None or gpu_unavailable,
            "gpu_unavailable": gpu_unavailable,
            "gpu": gpu_status(job, gpu_samples)
            if gpu_samples is not None and job.running
            else None,
            "tip": share_tip(job.comment),
        }
        if record and record.get("kind") == "sweep":
            row["results"] = sweep_results(record.get("checkpoint_dir"), record.get("output"))
        if record and record.get("checkpoint_dir"):
            d = Path(record["checkpoint_dir"])
            row["last_checkpoint"] = newest_checkpoint(d, record_globs(record))
            row["checkpoints"] = checkpoint_counts(d, record_globs(record))
            row["events"] = own_events(last_events(d, 50), job.job_id, sweep=tasks is not None)
        if tasks is not None and (tasks["total"] > 1 or tasks["waiting"]):
            row["tasks"] = tasks
            row["state"] = (
                "RUNNING" if tasks["running"] else "PENDING" if tasks["waiting"] else row["state"]
            )
            row["nodes"] = sorted(
                {n for j in arrays[job.array_job_id] if j.running for n in j.nodes}
            )
            starts = [j.start_time for j in arrays[job.array_job_id] if j.running and j.start_time]
            row["started_at"] = min(starts) if starts else None
        if job.pending:
            est = (estimates or {}).get(job.job_id)
            resume = None
            if row["checkpoint_dir"]:  # the checkpoint its next start resumes from ("": none)
                resume = Path(row["last_checkpoint"]).name if row["last_checkpoint"] else ""
            if isinstance(explainer, Explainer):
                row["explain"], row["why"] = explainer(
                    job.job_id, est, detail=job_id is not None, resumes_from=resume
                )
            else:
                row["explain"], row["why"] = prioritizer_explain(
                    job.job_id, explainer, est, resumes_from=resume
                )
            row["estimated_start"] = (estimates or {}).get(job.job_id)
        rows.append(row)
    return sorted(rows, key=lambda r: r["job_id"])


def job_deadline(job: Job) -> float | None:
    """When the job should be done: Slurm's ``--deadline``, else the filter's record of
    ``dl:deadline`` (or the first of ``dl:deadline_steps``, the one worth most)."""
    if job.deadline:
        return job.deadline
    tag = parse_tag(job.admin_comment)
    if tag is None:
        return None
    if tag.deadline:
        return float(tag.deadline)
    return float(tag.soft_deadlines[0][0]) if tag.soft_deadlines else None


def task_counts(members: list[Job]) -> dict[str, int]:
    """A sweep's tasks by state; the array's pending record stands for all its waiting tasks."""
    running = sum(1 for j in members if j.running or j.state.value in ("COMPLETING", "SUSPENDED"))
    waiting = sum(j.array_tasks for j in members if j.pending)
    ended = len(members) - running - sum(1 for j in members if j.pending)
    throttle = next((j.array_throttle for j in members if j.array_throttle), 0)
    return {
        "total": running + waiting + ended,
        "running": running,
        "waiting": waiting,
        "ended": ended,
        "throttle": throttle or 0,
    }


ACTIVE = {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED"}
_SLURM_REASONS = {
    "Priority": "behind higher-priority jobs",
    "Resources": "waiting for free GPUs",
    "None": "about to be scheduled",
    "BeginTime": "not before its begin time",
    "Dependency": "waiting for a job it depends on",
    "JobHeldUser": "held by you (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "ReqNodeNotAvail": "the nodes it needs are unavailable",
    "PartitionTimeLimit": "its --time is over the partition's limit",
    "QOSMaxGRESPerUser": "your GPU limit is reached",
    "AssocGrpGRES": "your account's GPU limit is reached",
}


def local_time(at: float | None, now: float | None = None, short: bool = False) -> str:
    """A time as the user's clock shows it: HH:MM today, else MM-DD HH:MM (MM-DD when short)."""
    if not at:
        return "-"
    now = time.time() if now is None else now
    t, today = time.localtime(at), time.localtime(now)
    if (t.tm_year, t.tm_yday) == (today.tm_year, today.tm_yday):
        return time.strftime("%H:%M", t)
    return time.strftime("%m-%d" if short else "%m-%d %H:%M", t)


def parse_since(text: str) -> float:
    """``30m``, ``12h``, ``2d`` (or a number of hours) as seconds."""
    t = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    try:
        if t and t[-1] in units:
            value = float(t[:-1]) * units[t[-1]]
        else:
            value = float(t) * 3600
    except ValueError:
        raise ValueError(f"--since {text!r}: expected a duration such as 30m, 12h or 2d") from None
    if value <= 0:
        raise ValueError(f"--since {text!r}: must be more than zero")
    return value


def select_rows(
    rows: list[dict[str, Any]], *, show_all: bool, since_s: float, now: float
) -> list[dict[str, Any]]:
    """Running and waiting jobs, and those that ended within ``since_s``; everything with ``show_all``."""
    if show_all:
        return rows
    return [
        r for r in rows if r["state"] in ACTIVE or (r.get("submitted_at") or now) >= now - since_s
    ]


def why_line(row: dict[str, Any], with_start: bool = True) -> str:
    """One line on where the job is: the prioritizer's summary, Slurm's reason in words, or its
    nodes; a sweep by its tasks' states. ``with_start``: Slurm's start estimate included (the
    table has a column of its own for it)."""
    state = row["state"]
    tasks = row.get("tasks")
    if tasks:
        text = tasks_words(tasks, long=with_start)
    elif state == "PENDING":
        if row.get("why"):
            text = row["why"]
            if not with_start:
                text = text.split(", start ~")[0]
        else:
            reason = row.get("reason") or "None"
            text = _SLURM_REASONS.get(reason, "Slurm: " + reason)
            if with_start and row.get("estimated_start"):
                text += f", start ~{local_time(row['estimated_start'])}"
    elif state in ("RUNNING", "COMPLETING", "SUSPENDED"):
        where = compress_hostlist(row["nodes"]) if row["nodes"] else "-"
        started = row.get("started_at")
        text = f"on {where}" + (f" since {local_time(started)}" if started and with_start else "")
    elif state == "REQUEUED":
        text = "requeued after a checkpoint; waits to resume"
    elif state == "ENDED":
        text = f"ended: dlsubmit logs {row['job_id']}"
    elif state in _FINAL:
        text = f"{_FINAL[state]}: dlsubmit logs {row['job_id']}"
    else:
        text = state.lower().replace("_", " ")
    return text


def tasks_words(tasks: dict[str, int], long: bool = False) -> str:
    """A sweep's tasks by state: ``3 tasks: 2 running, 1 waiting`` (``long``: and the cap
    on how many run at once)."""
    parts = [f"{n} {word}" for word, n in tasks.items() if word not in ("total", "throttle") and n]
    text = f"{tasks['total']} tasks: " + ", ".join(parts)
    if long and tasks.get("throttle") and tasks.get("waiting"):
        text += f" (at most {tasks['throttle']} run at once)"
    return text


def log_display(path: str, tasks: int | None = None) -> str:
    """A log file name as the user will find it: a sweep's ``%a`` as its tasks' numbers."""
    if "%a" not in path:
        return path
    if not tasks:
        return path.replace("%a", "<task>") + " (one log per task)"
    first = path.replace("%a", "0")
    return first if tasks == 1 else f"{first} … {Path(path.replace('%a', str(tasks - 1))).name}"


def _clock_or_day(at: float, now: float) -> str:
    """HH:MM within 20 hours of ``now`` (the next morning too), else MM-DD."""
    return time.strftime("%H:%M" if abs(at - now) < 20 * 3600 else "%m-%d", time.localtime(at))


def start_cell(row: dict[str, Any], now: float | None = None) -> str:
    """The START column: when a running job started, ``~`` when Slurm expects a waiting one to."""
    now = time.time() if now is None else now
    if row["state"] == "PENDING":
        est = row.get("estimated_start")
        if est is None and row.get("why") and ", start ~" in row["why"]:
            return "~" + row["why"].split(", start ~")[1].split(",")[0]
        return f"~{_clock_or_day(est, now)}" if est else "-"
    if row["state"] in ("RUNNING", "COMPLETING", "SUSPENDED") and row.get("started_at"):
        return _clock_or_day(row["started_at"], now)
    return "-"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def status_table(
    rows: list[dict[str, Any]], width: int = 80, now: float | None = None
) -> list[str]:
    """The table as lines no wider than ``width``: job, name, state, submitted, start (Slurm's
    estimate for a waiting job), restarts and deadline (when any job has them), then where it
    runs or why it waits, wrapped onto more lines rather than cut."""
    now = time.time() if now is None else now
    restarts = any(r.get("restarts") for r in rows)
    deadlines = any(r.get("deadline") for r in rows)
    name_w = 10 if restarts and deadlines else 12
    job_w = max([3, *(len(str(r["job_id"])) for r in rows)])
    cols: list[tuple[str, int, str, Callable[[dict[str, Any]], str]]] = [
        ("JOB", job_w, ">", lambda r: str(r["job_id"])),
        ("NAME", name_w, "<", lambda r: _cut(r["name"], name_w)),
        ("STATE", 9, "<", lambda r: _cut(r["state"], 9)),
        ("SUBMITTED", 9, "<", lambda r: local_time(r.get("submitted_at"), now, short=True)),
        ("START", 6, "<", lambda r: start_cell(r, now)),
    ]
    if restarts:
        cols.append(("RESTARTS", 8, ">", lambda r: str(r.get("restarts") or 0)))
    if deadlines:
        cols.append(("DEADLINE", 8, "<", lambda r: deadline_cell(r, now)))
    fixed = sum(w + 1 for _, w, _, _ in cols)
    rest = max(16, width - fixed)

    def line(cells: list[str], last: str) -> str:
        return " ".join(f"{c:{a}{w}}" for c, (_, w, a, _) in zip(cells, cols)) + " " + last

    last_head = "WHERE / WHY IT WAITS" if rest >= 20 else "WHERE / WHY"
    lines = [_cut(line([h for h, *_ in cols], last_head), width)]
    for r in rows:
        why = textwrap.wrap(why_line(r, with_start=False), rest, break_on_hyphens=False) or ["-"]
        lines.append(line([cell(r) for *_, cell in cols], why[0]))
        lines.extend(" " * fixed + more for more in why[1:])
        gpu = gpu_cell(r)
        if r["state"] == "RUNNING" and gpu not in ("-", "–"):
            lines.append(_cut(f"{'':>9}GPU use: {gpu}", width))
        if r.get("tip") and r["state"] in ("RUNNING", "PENDING"):
            lines.append(_cut(f"{'':>9}tip: {SHARE_HINT_MARK} (dlsubmit --share)", width))
        if r.get("results"):
            more = f"{results_summary(r['results'])} (dlsubmit status {r['job_id']})"
            lines.append(_cut(f"{'':>9}{more}", width))
    return lines


def deadline_cell(row: dict[str, Any], now: float) -> str:
    """The DEADLINE column: HH:MM within 20 hours, else MM-DD; ``-`` without one."""
    return _clock_or_day(row["deadline"], now) if row.get("deadline") else "-"


_FINAL = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
    "TIMEOUT": "hit its time limit",
    "OUT_OF_MEMORY": "ran out of memory",
    "NODE_FAIL": "its node failed",
    "PREEMPTED": "preempted",
}
_LABELS = {"RUNNING": "where:", "PENDING": "waiting:", "REQUEUED": "waiting:"}


def detail_lines(r: dict[str, Any]) -> list[str]:
    """``dlsubmit status JOBID``: everything known about one job."""
    lines = [
        f"job {r['job_id']} ({r['name']}): {r['state']}, {r['kind'] or 'not submitted by dlsubmit'}",
        f"  {_LABELS.get(r['state'], 'state:'):<12} {why_line(r, with_start=r['state'] != 'PENDING')}",
    ]
    if r["state"] == "PENDING" and not r.get("tasks"):
        est = r.get("estimated_start")
        lines.append(
            f"  {'start:':<12} "
            + (f"Slurm expects {local_time(est)}" if est else "Slurm has not estimated it yet")
        )
    if r.get("submitted_at"):
        lines.append(f"  submitted:   {local_time(r['submitted_at'])}")
    lines.append(f"  restarts:    {r['restarts']}")
    if r.get("deadline"):
        lines.append(f"  deadline:    {local_time(r['deadline'])}")
    if r.get("output"):
        lines.append(
            f"  log:         {log_display(r['output'], (r.get('tasks') or {}).get('total'))}"
        )
    if r.get("checkpoint_dir") and r.get("kind") != "serve":
        lines.append(f"  checkpoints: {r['checkpoint_dir']}")
        lines.append(f"  resume from: {resume_words(r)}")
    if r.get("telemetry"):
        lines.append(f"  GPU use:     {gpu_cell(r)}")
        if r["state"] == "RUNNING" and r.get("gpu_unavailable"):
            lines.extend(UNAVAILABLE_HINT.splitlines())
        if r["state"] == "RUNNING" and (r.get("gpu") or {}).get("over_share"):
            lines.extend(OVER_SHARE_HINT.splitlines())
    if r.get("tip"):
        lines.extend(wrap_tip(r["tip"]))
    if r.get("results"):
        lines.append(f"  {results_summary(r['results'])}:")
        lines.extend(result_lines(r["results"]))
    if r["events"]:
        lines.append("  recent events:")
        for ev in r["events"]:
            lines.extend(
                textwrap.wrap(
                    event_text(ev),
                    80,
                    initial_indent="    ",
                    subsequent_indent="      ",
                    break_on_hyphens=False,
                    break_long_words=True,
                )
            )
    if r.get("explain"):
        lines.append("what the prioritizer says (slurm-dl explain):")
        lines.extend(r["explain"].splitlines())
    return lines


def resume_words(r: dict[str, Any]) -> str:
    """Which checkpoint the job resumes from when it starts again, and why that one."""
    counts = r.get("checkpoints") or {}
    n, others = counts.get("checkpoints", 0), counts.get("others", 0)
    if r.get("last_checkpoint"):
        name = Path(r["last_checkpoint"]).name
        return f"{name} (the newest of {n} checkpoints)" if n > 1 else name
    if others:
        return f"none: no checkpoint yet ({others} other files: not checkpoints)"
    return "none yet"


def wrap_tip(text: str, width: int = 80) -> list[str]:
    return textwrap.wrap(text, width, initial_indent="  tip:         ", subsequent_indent=" " * 15)


_EVENT_FIELD = re.compile(r"(\w[\w-]*)=(\S+)")


def _ago(seconds: str | None) -> str:
    try:
        return f"{int(seconds) // 60} min" if int(seconds) >= 120 else f"{int(seconds)} s"
    except (TypeError, ValueError):
        return "?"


def event_sentence(kind: str, f: dict[str, str], note: str) -> str:
    """One event of the job's script (``event=KIND key=value …: note``) in words."""
    rc = f.get("rc")
    sentences = {
        "start": "started; no checkpoint to resume from yet",
        "resume": f"resumed from checkpoint {Path(f.get('from', '?')).name} (restart {f.get('restart', '?')})",
        "restart-cap": f"not started again: restarted {f.get('restarts', '?')} times, the limit is {f.get('max', '?')}",
        "preempt": f"asked to checkpoint for another job ({_ago(f.get('time_left_s'))} of its time left)",
        "timeout": f"asked to checkpoint: its time limit is near ({_ago(f.get('time_left_s'))} left)",
        "checkpointed": f"checkpointed in {_ago(f.get('took_s'))} (exit code {rc})"
        if f.get("took_s")
        else f"checkpointed (exit code {rc})",
        "no-checkpoint": f"wrote no checkpoint after the signal (exit code {rc}): work lost",
        "lost-work": lost_sentence(f),
        "timeout-checkpointed": f"checkpointed at its time limit (exit code {rc})",
        "requeue-self": "requeued itself to resume",
        "requeue-failed": "could not requeue itself (scontrol requeue failed)",
        "exit": "ended successfully" if rc == "0" else f"ended with exit code {rc}",
        "task": f"sweep task {f.get('index', '?')} started with value {f.get('param', '?')}",
        "progress": f"{f.get('done', '?')} of {f.get('total', '?')} inputs done",
        "item-failed": f"input {f.get('index', '?')} failed (exit code {rc})",
        "serving": f"serving on {f.get('host', '?')}:{f.get('port', '?')}",
        "error": f"error: {note}" if note else "error",
    }
    text = sentences.get(kind, f"{kind}{': ' + note if note else ''}")
    if kind in ("timeout-checkpointed",) and note:
        text += f"; {note.split(';', 1)[-1].strip()}" if ";" in note else ""
    return text


def lost_sentence(f: dict[str, str]) -> str:
    """A restart after a preemption whose requeue cut the save short."""
    saved = f.get("saved", "0")
    since = local_time(float(saved)) if saved.isdigit() and int(saved) > 0 else "its start"
    return f"requeued before its save finished: work since {since} lost"


def event_text(line: str) -> str:
    """``1763900000 job=77 restart=1 event=resume from=…`` as ``HH:MM resumed from …``."""
    head, _, rest = line.partition(" ")
    if not head.isdigit():
        return line
    body, _, note = rest.partition(": ")
    fields = dict(_EVENT_FIELD.findall(body))
    kind = fields.pop("event", None)
    if kind is None:  # a plain message of the script
        return f"{local_time(float(head))} {_EVENT_FIELD.sub('', rest).strip()}"
    words = body.split("event=" + kind, 1)[-1]
    free = " ".join(w for w in words.split() if "=" not in w and not w.startswith("("))
    note = note or free or ("no checkpoint yet" if "(no checkpoint yet)" in words else "")
    return f"{local_time(float(head))} {event_sentence(kind, fields, note)}"


def print_status(rows: list[dict[str, Any]], detail: bool = False, note: str | None = None) -> None:
    """The table (or each job's details), then ``note`` (why the prioritizer was not asked)."""
    if not rows:
        typer.echo("no dlsubmit jobs running, waiting or recently ended (--all lists every one)")
        return
    width = max(60, min(shutil.get_terminal_size((80, 24)).columns, 120))
    lines = [ln for r in rows for ln in detail_lines(r)] if detail else status_table(rows, width)
    if note and any(r["state"] == "PENDING" for r in rows):
        lines += textwrap.wrap(f"note: {note}", width, subsequent_indent="  ")
    for line in lines:
        typer.echo(line)
