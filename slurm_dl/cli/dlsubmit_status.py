"""``dlsubmit status``: Slurm's view of a job plus what dlsubmit knows about its checkpoints.

At submission dlsubmit keeps a small record per job (``$SLURM_DL_STATE_DIR``, else
``$XDG_STATE_HOME/slurm-dl/jobs``, else ``~/.local/state/slurm-dl/jobs``): kind, name, output
file and absolute checkpoint directory. Status joins it with the backend's jobs, the newest
complete checkpoint and the last events the script logged in ``CKPT_DIR/.dlsubmit/events``,
and asks the prioritizer why a pending job waits when the prioritizer is installed. A running
job's GPU use comes from the gpu-agents' files when the site config names them (``dlsubmit_gpu``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterable

from rich.console import Console
from rich.table import Table

from ..model import Job
from ..render import RenderedJob
from ..site_paths import sqlite_path
from ..telemetry.samples import JobGpuSample
from .dlsubmit_gpu import gpu_cell, gpu_status


def state_dir() -> Path:
    """Records per cluster: job ids repeat across clusters (one subdirectory per SLURM_CONF)."""
    if os.environ.get("SLURM_DL_STATE_DIR"):
        base = Path(os.environ["SLURM_DL_STATE_DIR"])
    else:
        base = Path(os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")) / "slurm-dl" / "jobs"
    conf = os.environ.get("SLURM_CONF", "")
    return base / (hashlib.sha256(conf.encode()).hexdigest()[:12] if conf else "default")


def output_path(pattern: str, job_id: int) -> str:
    """The output file name sbatch makes of our pattern (%j job, %A array master; %a stays per task)."""
    return pattern.replace("%j", str(job_id)).replace("%A", str(job_id))


def save_record(job_id: int, job: RenderedJob, cwd: Path) -> None:
    """Remember where this job's output and checkpoints are (best effort: status works without it)."""
    ckpt = Path(job.checkpoint_dir)
    record = {
        "job_id": job_id, "kind": job.kind, "name": job.name, "workdir": str(cwd),
        "output": str(cwd / output_path(job.output, job_id)), "checkpoint_dir": str(ckpt if ckpt.is_absolute() else cwd / ckpt),
    }
    try:
        d = state_dir()
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{job_id}.json").write_text(json.dumps(record))
    except OSError:
        pass


def load_record(job_id: int) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir() / f"{job_id}.json").read_text())
    except (OSError, ValueError):
        return None


def forget_missing(known: set[int]) -> None:
    """Records of jobs Slurm no longer lists are kept for a day, then dropped."""
    d = state_dir()
    if not d.is_dir():
        return
    for p in d.glob("*.json"):
        try:
            if p.stem.isdigit() and int(p.stem) not in known and time.time() - p.stat().st_mtime > 86400:
                p.unlink()
        except OSError:
            pass


def newest_checkpoint(ckpt_dir: Path) -> str | None:
    """Same rule as the scripts: newest entry that is not hidden and not *.tmp/*.partial/*.incomplete."""
    try:
        entries = [p for p in ckpt_dir.iterdir()
                   if not p.name.startswith(".") and not p.name.endswith((".tmp", ".partial", ".incomplete"))]
    except OSError:
        return None
    if not entries:
        return None
    return str(max(entries, key=lambda p: p.stat().st_mtime_ns))


def last_events(ckpt_dir: Path, n: int = 3) -> list[str]:
    try:
        lines = (ckpt_dir / ".dlsubmit" / "events").read_text(errors="replace").splitlines()
    except OSError:
        return []
    return lines[-n:]


def prioritizer_explain(job_id: int, database_url: str | None) -> str | None:
    """The prioritizer's explanation of a job (``slurm-dl explain``); None when there is no data:
    the prioritizer is not installed, its store does not exist, or it has not seen the job yet."""
    if not database_url:
        return None
    path = sqlite_path(database_url)
    if path is not None and (not path or not Path(path).exists()):
        return None
    try:
        from ..explain import render_explanation
        from ..store import Store
    except ImportError:
        return None
    try:
        store = Store(database_url)
        expl = store.explanation(job_id)
        if not expl or "factors" not in expl:
            return None
        decisions = [{"at": d.at, "kind": d.kind, "value": d.value, "reason": d.reason} for d in store.decisions(job_id)]
        return render_explanation(expl, decisions)
    except Exception:  # noqa: BLE001 - a broken or foreign store must not break `dlsubmit status`
        return None


def describe_jobs(jobs: Iterable[Job], job_id: int | None, database_url: str | None = None,
                  gpu_samples: list[JobGpuSample] | None = None) -> list[dict[str, Any]]:
    """One row per job; ``gpu_samples`` (the agents' files; None: telemetry not configured) give
    running jobs their ``gpu`` entry."""
    rows = []
    for job in jobs:
        record = load_record(job.job_id)
        if record is not None and record.get("name") != job.name:
            record = None  # the id was reused (another cluster or a reset one): not our job
        if job_id is not None:
            if job.job_id != job_id:
                continue
        elif record is None:
            continue
        row: dict[str, Any] = {
            "job_id": job.job_id, "name": job.name, "state": job.state.value, "reason": job.state_reason,
            "restarts": job.restarts, "nodes": list(job.nodes), "kind": record and record.get("kind"),
            "output": record and record.get("output"), "checkpoint_dir": record and record.get("checkpoint_dir"),
            "last_checkpoint": None, "events": [], "explain": None,
            "telemetry": gpu_samples is not None,
            "gpu": gpu_status(job, gpu_samples) if gpu_samples is not None and job.running else None,
        }
        if record and record.get("checkpoint_dir"):
            d = Path(record["checkpoint_dir"])
            row["last_checkpoint"] = newest_checkpoint(d)
            row["events"] = last_events(d)
        if job.pending:
            row["explain"] = prioritizer_explain(job.job_id, database_url)
        rows.append(row)
    return sorted(rows, key=lambda r: r["job_id"])


def print_status(rows: list[dict[str, Any]]) -> None:
    console = Console()
    if not rows:
        console.print("no dlsubmit jobs known to Slurm")
        return
    table = Table(show_header=True, header_style="bold")
    for col in ("job", "name", "kind", "state", "restarts", "why waiting / nodes", "GPU use", "last checkpoint"):
        table.add_column(col)
    for r in rows:
        why = (r["explain"] or (f"{r['reason']} (no prioritizer data)" if r["reason"] else "no prioritizer data")) \
            if r["state"] == "PENDING" else ",".join(r["nodes"])
        table.add_row(str(r["job_id"]), r["name"], r["kind"] or "-", r["state"], str(r["restarts"]), why,
                      gpu_cell(r), Path(r["last_checkpoint"]).name if r["last_checkpoint"] else "-")
    console.print(table)
    for r in rows:
        for line in r["events"]:
            console.print(f"  {r['job_id']}: {line}", markup=False, highlight=False)
