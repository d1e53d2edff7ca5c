"""``dlsubmit status``'s GPU column: a running job's utilisation from the gpu-agents' files.

Users' machines read the same ``<node>.prom`` files the prioritizer reads (the site config's
``[telemetry] exposition_dir``, e.g. on a shared filesystem); no daemon database is needed. The
idle time comes from the agents' ``idle_since`` and the warning from slurm-dl's note in the
job's comment. Pure: the caller reads the files.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..core.idle.notice import current_note, note_state
from ..core.model import Job
from ..telemetry.samples import JobGpuSample

NOT_CONFIGURED = "–"
NOT_AVAILABLE = "not available"
UNAVAILABLE_HINT = (
    "  (the GPU telemetry files cannot be read here; your admins can fix it:\n"
    "  slurm-dl doctor says how)"
)


def gpu_status(job: Job, samples: Iterable[JobGpuSample]) -> dict[str, Any] | None:
    """The job's GPUs at their latest sample: mean utilisation, memory, idle minutes, slurm-dl's note;
    None when no sample names the job on one of its own nodes."""
    latest: dict[tuple[str, int], JobGpuSample] = {}
    for s in samples:
        if s.job_id == job.job_id and s.node in job.nodes:
            key = (s.node, s.gpu)
            if key not in latest or s.time > latest[key].time:
                latest[key] = s
    if not latest:
        return None
    rows = list(latest.values())
    idle_minutes = None
    if all(r.idle_since is not None for r in rows):
        idle_minutes = round(
            max(0.0, min(r.time for r in rows) - max(r.idle_since for r in rows)) / 60.0, 1
        )
    shares = [r.share_bytes for r in rows if r.share_bytes is not None]
    share = sum(shares) if shares else None
    used = sum(r.mem_used_bytes for r in rows)
    return {
        "gpus": len(rows),
        "share_bytes": share,
        "over_share": share is not None and used > share,
        "mean_util_percent": round(sum(r.util_percent for r in rows) / len(rows), 1),
        "mem_used_bytes": used,
        "processes": sum(r.processes for r in rows),
        "idle_minutes": idle_minutes,
        "sampled_at": min(r.time for r in rows),
        "note": current_note(job.comment),
    }


OVER_SHARE_HINT = (
    "  (neighbours on its GPU may run out of memory: ask for more shards, or a whole\n"
    "  GPU with --comment=dl:share=0)"
)


def gpu_cell(row: dict[str, Any]) -> str:
    """The table cell: '–' without telemetry, 'not available' where its files cannot be read,
    else utilisation, memory, idle time and any warning."""
    if not row.get("telemetry"):
        return NOT_CONFIGURED
    if row["state"] != "RUNNING":
        return "-"
    if row.get("gpu_unavailable"):
        return NOT_AVAILABLE
    g = row.get("gpu")
    if g is None:
        return "no samples"
    share = g.get("share_bytes")
    if share is None:
        text = f"{g['mean_util_percent']:g}% of {g['gpus']} GPU(s), {g['mem_used_bytes'] / 2**30:.1f} GiB"
    else:
        mem = f"{g['mem_used_bytes'] / 2**30:.1f} GiB of its {share / 2**30:.1f} GiB share"
        text = (
            f"OVER its share: {mem}, {g['mean_util_percent']:g}% of a GPU"
            if g.get("over_share")
            else f"{g['mean_util_percent']:g}% of a GPU, {mem}"
        )
    if g["idle_minutes"] is not None:
        text += f", idle {g['idle_minutes']:.0f} min"
    state = note_state(g.get("note"))
    if state is not None:
        text += ", " + state
    return text
