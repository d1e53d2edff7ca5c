"""Pure parser of ``sacct --json`` (slurmdbd's records of jobs, finished ones included) -> Job.

22.05 (openapi dbv0.0.38) and 24.11/26.05 (data_parser v0.0.42/v0.0.45) differ in: ``state.current``
(string vs list), ``time.limit`` and ``exit_code.return_code`` (plain numbers vs
``{set, infinite, number}``), ``comment`` (``{job, administrator}`` in both), ``restart_cnt``
(absent in 22.05). GPUs come from the allocated TRES (``gres``/``gpu``), else the requested.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..core.model import Job, JobState
from .dialects import dialect_of, state_text
from .parse import _nodes, _num, _raise_json_errors


def _tres_gpus(items: Iterable[Mapping[str, Any]] | None) -> int:
    total = 0
    for item in items or []:
        if item.get("type") == "gres" and str(item.get("name") or "").split(":")[0] == "gpu":
            total += _num(item.get("count")) or 0
    return total


def job_from_sacct(raw: Mapping[str, Any]) -> Job:
    state_field = raw.get("state") or {}
    state = JobState.parse(
        state_text(state_field.get("current") if isinstance(state_field, Mapping) else state_field)
    )
    times = raw.get("time") or {}
    tres = raw.get("tres") or {}
    gpus = _tres_gpus(tres.get("allocated")) or _tres_gpus(tres.get("requested"))
    start, end = _num(times.get("start")), _num(times.get("end"))
    limit = _num(times.get("limit"))
    comment = raw.get("comment") or {}
    if not isinstance(comment, Mapping):
        comment = {"job": comment}
    elapsed = _num(times.get("elapsed")) or 0
    return Job(
        job_id=int(raw["job_id"]),
        user=str(raw.get("user") or ""),
        account=str(raw.get("account") or ""),
        name=str(raw.get("name") or ""),
        num_gpus=gpus,
        num_nodes=_num(raw.get("allocation_nodes")) or None,
        partition=str(raw.get("partition") or ""),
        submit_time=float(_num(times.get("submission")) or 0),
        eligible_time=float(_num(times.get("eligible"))) if _num(times.get("eligible")) else None,
        start_time=float(start) if start else None,
        time_limit=float(limit * 60) if limit else None,
        state=state,
        state_reason=""
        if state_field.get("reason") in (None, "None")
        else str(state_field.get("reason")),
        restarts=_num(raw.get("restart_cnt")) or 0,
        nodes=_nodes(raw.get("nodes")),
        executed_s=float(
            elapsed if elapsed else (end - start if start and end and end > start else 0)
        ),
        attained_gpu_s=float(gpus * elapsed),
        comment=str(comment.get("job") or ""),
        admin_comment=str(comment.get("administrator") or ""),
    )


def parse_sacct_json(doc: Mapping[str, Any]) -> list[Job]:
    """Every job record of a ``sacct --json`` document (steps are not jobs)."""
    _raise_json_errors(doc, "sacct --json")
    if "meta" in doc:
        dialect_of(doc, "sacct --json")
    return [job_from_sacct(raw) for raw in doc.get("jobs") or []]


def finished_jobs(
    job_ids: Iterable[int], env: Mapping[str, str] | None = None, timeout: float = 5.0
) -> dict[int, Job] | None:
    """Slurm's accounting records of ``job_ids`` (finished ones included), by job id; None where
    the site keeps no accounting (no slurmdbd) or sacct cannot be asked."""
    import json

    from ..core.errors import SlurmDLError
    from .runner import run_slurm

    ids = sorted(set(job_ids))
    if not ids:
        return {}
    try:
        out = run_slurm(
            ["sacct", "--json", "-X", "-S", "now-30days", "-j", ",".join(map(str, ids))],
            env=env,
            timeout=timeout,
        ).stdout
        jobs = parse_sacct_json(json.loads(out))
    except (SlurmDLError, ValueError):
        return None
    wanted = set(ids)
    return {j.job_id: j for j in jobs if j.job_id in wanted}
