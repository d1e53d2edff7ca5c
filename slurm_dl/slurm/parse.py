"""Pure parsers: what Slurm 22.05 prints -> slurm_dl.core.model objects. No I/O, no clock.

Sources: ``squeue --json`` and ``sinfo --json`` (openapi v0.0.38), ``scontrol -o show partition``
and ``scontrol show topology``. Tested against output recorded from the live testbed
(tests/fixtures/slurm/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..core.arrays import parse_array
from ..core.errors import SlurmError
from ..core.hostlist import expand_hostlist
from ..core.model import Job, JobState, Node, Partition, Switch, Topology
from .dialects import dialect_of, job_record, node_record
from .protocol import JobEnd

# Slurm's "unset" numbers (NO_VAL, INFINITE, NO_VAL16 ...) as they leak into JSON.
_UNSET = {0xFFFFFFFE, 0xFFFFFFFF, 0xFFFE, 0xFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF}


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """A GPU request as Slurm encodes it: ``gres:gpu:h100:2`` -> count 2, type h100."""

    count: int
    gpu_type: str | None = None


_GPU_ITEM = re.compile(r"^(?:gres[:/])?gpu(?::([A-Za-z0-9_.\-]+))?(?::(\d+))?$")


def parse_gpu_request(spec: str | None) -> GpuRequest | None:
    """GPUs in a ``tres_per_node``/``tres_per_job`` string, or None if it asks for no GPU.

    Accepts ``gres:gpu:3``, ``gres:gpu:h100:2``, ``gpu:2``, ``gres/gpu:h100=2`` (TRES form) and
    lists (``gres:gpu:2,gres:nic:1``). A bare ``gpu`` means one GPU.
    """
    if not spec:
        return None
    total, gtype, found = 0, None, False
    for item in spec.split(","):
        item = item.strip()
        if "=" in item:  # TRES form gres/gpu:h100=2
            name, _, num = item.partition("=")
            item = f"{name}:{num}" if num.isdigit() else name
        m = _GPU_ITEM.match(item)
        if not m:
            continue
        first, count = m.group(1), m.group(2)
        if first is not None and count is None and first.isdigit():
            first, count = None, first
        found = True
        total += int(count) if count is not None else 1
        if first is not None:
            gtype = first
    return GpuRequest(total, gtype) if found else None


_SHARD_ITEM = re.compile(r"^(?:gres[:/])?shard(?::[A-Za-z0-9_.\-]+)?(?::|=)(\d+)$")


def parse_shard_request(spec: str | None) -> int:
    """Shards in a ``tres_per_node`` string (``gres:shard:2``, ``gres/shard=2``); 0 without."""
    total = 0
    for item in (spec or "").split(","):
        m = _SHARD_ITEM.match(item.strip())
        if m:
            total += int(m.group(1))
    return total


_GRES_DETAIL = re.compile(r"gpu(?::([A-Za-z0-9_.\-]+))?:(\d+)")


def parse_gres_detail(items: Iterable[str]) -> tuple[int, str | None]:
    """Allocated GPUs from ``gres_detail`` (one entry per node: ``gpu:h100:3(IDX:0-2)``)."""
    total, gtype = 0, None
    for entry in items:
        for part in _split_gres(entry):
            m = _GRES_DETAIL.match(part)
            if m:
                total += int(m.group(2))
                gtype = m.group(1) or gtype
    return total, gtype


def _split_gres(text: str) -> list[str]:
    """Split a GRES list on top-level commas (``gpu:h100:2(IDX:0,3),nic:1`` has a nested one)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip() and p.strip() not in ("(null)", "N/A")]


_ALLOC_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")


def gpus_in_tres(text: str | None) -> int | None:
    """GPUs in a TRES string (``AllocTRES``/``tres_alloc_str``: ``cpu=2,...,gres/gpu=8``), or None
    when it names no GPUs (22.05 lists them only with ``AccountingStorageTRES=gres/gpu``)."""
    m = _ALLOC_GPU.search(text or "")
    return int(m.group(1)) if m else None


def parse_node_gres(gres: str | None) -> tuple[int, str | None]:
    """GPUs in a node's ``Gres``/``GresUsed`` (``gpu:h100:8``, ``gpu:h100:3(IDX:0-2)``)."""
    return parse_gres_detail([gres or ""])


def _num(value: Any) -> int | None:
    """A JSON number that may be null, a Slurm 'unset' sentinel, or an openapi {set, number}."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return None if n in _UNSET else n


def _time(value: Any) -> float | None:
    n = _num(value)
    return float(n) if n else None


def _nodes(expr: str | None) -> tuple[str, ...]:
    if not expr or expr in ("(null)", "None assigned"):
        return ()
    try:
        return tuple(expand_hostlist(expr))
    except ValueError:
        return (expr,)


def job_from_squeue(raw: Mapping[str, Any]) -> Job:
    """One ``squeue --json`` job record (of any supported release) -> Job (one array task is one job)."""
    raw = job_record(raw)
    state = JobState.parse(str(raw.get("job_state") or ""))
    node_count = _num(raw.get("node_count"))
    per_node = parse_gpu_request(raw.get("tres_per_node"))
    per_job = parse_gpu_request(raw.get("tres_per_job"))
    allocated, alloc_type = parse_gres_detail(raw.get("gres_detail") or [])
    gpus_per_node: int | None = None
    num_nodes: int | None = node_count if node_count else None
    gpu_type = None
    if per_node is not None:
        gpus_per_node = per_node.count
        gpu_type = per_node.gpu_type
        num_gpus = per_node.count * (num_nodes or 1)
    elif per_job is not None:
        num_gpus = per_job.count
        gpu_type = per_job.gpu_type
    else:
        num_gpus = 0
    tasks = _num(raw.get("tasks")) or 1
    for text, times in (
        (raw.get("tres_per_task"), tasks),
        (raw.get("tres_per_socket"), (_num(raw.get("sockets_per_node")) or 1) * (num_nodes or 1)),
    ):
        asked = parse_gpu_request(text)  # --gpus-per-task × tasks, --gpus-per-socket × sockets
        if asked is not None:
            num_gpus += asked.count * times
            gpu_type = gpu_type or asked.gpu_type
    if state.active:  # what Slurm allocated, not what was asked: AllocTRES, else the GRES detail
        alloc_tres = gpus_in_tres(raw.get("tres_alloc_str"))
        if alloc_tres is not None:
            num_gpus = alloc_tres
        elif allocated:
            num_gpus = allocated
    gpu_type = gpu_type or alloc_type
    time_limit_min = _num(raw.get("time_limit"))
    nice = _num(raw.get("nice"))
    job_id = int(raw["job_id"])
    return Job(
        job_id=job_id,
        user=str(raw.get("user_name") or ""),
        account=str(raw.get("account") or ""),
        name=str(raw.get("name") or ""),
        num_gpus=num_gpus,
        gpus_per_node=gpus_per_node,
        num_nodes=num_nodes if (per_node is not None or state.active) else None,
        gpu_type=gpu_type,
        partition=str(raw.get("partition") or ""),
        submit_time=float(_num(raw.get("submit_time")) or 0),
        eligible_time=_time(raw.get("eligible_time")),
        start_time=_time(raw.get("start_time")) if state.active else None,
        time_limit=float(time_limit_min * 60) if time_limit_min else None,
        deadline=_time(raw.get("deadline")),
        state=state,
        state_reason="" if raw.get("state_reason") in (None, "None") else str(raw["state_reason"]),
        restarts=_num(raw.get("restart_cnt")) or 0,
        nodes=_nodes(raw.get("nodes")) if state.active else (),
        priority=_num(raw.get("priority")) or 0,
        nice=nice or 0,
        comment=str(raw.get("comment") or ""),
        admin_comment=str(raw.get("admin_comment") or ""),
        qos=str(raw.get("qos") or ""),
        features=str(raw.get("features") or ""),
        requeue=_flag(raw.get("requeue")),
        array_job_id=_array_job_id(raw, job_id),
        shards=parse_shard_request(raw.get("tres_per_node")),
        **_array_tasks(raw, state),
    )


def _array_tasks(raw: Mapping[str, Any], state: JobState) -> dict[str, Any]:
    """A pending array record's task count and throttle: ``array_task_string`` ``0-49%4`` in
    ``--json``, the task id column in ``squeue -O``."""
    if state is not JobState.PENDING:
        return {}
    text = raw.get("array_task_string") or raw.get("array_task_id")
    spec = parse_array(text) if isinstance(text, str) and not text.isdigit() else None
    if spec is None:
        return {}
    throttle = spec.throttle or _num(raw.get("array_max_tasks")) or None
    return {"array_tasks": spec.tasks, "array_throttle": throttle}


def _flag(value: Any) -> bool | None:
    """A yes/no field: a JSON boolean, or squeue -O's 1/0."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, str)) and str(value).strip() in ("0", "1"):
        return str(value).strip() == "1"
    return None


def _array_job_id(raw: Mapping[str, Any], job_id: int) -> int | None:
    """The array a job belongs to. ``--json`` gives 0 for a plain job; ``squeue -O`` gives the job's
    own id and no task id; an array's pending record has its own id and a task string."""
    n = _num(raw.get("array_job_id"))
    if not n:
        return None
    task = raw.get("array_task_id")
    if isinstance(task, Mapping):
        task = task.get("number") if task.get("set", True) else None
    if n != job_id or task not in (None, "", "N/A") or raw.get("array_task_string"):
        return n
    return None


def parse_squeue_json(
    doc: Mapping[str, Any], states: Iterable[JobState] | None = None
) -> list[Job]:
    """Jobs of a ``squeue --json`` document, filtered client-side (22.05 ignores ``-t``/``-j``).

    By default only pending and active jobs; pass ``states`` to choose others.
    """
    _raise_json_errors(doc, "squeue --json")
    if "meta" in doc:
        dialect_of(doc, "squeue --json")
    return select_jobs((job_from_squeue(raw) for raw in doc.get("jobs") or []), states)


def select_jobs(jobs: Iterable[Job], states: Iterable[JobState] | None = None) -> list[Job]:
    """Keep the jobs in ``states``; by default the pending and active ones (squeue also lists
    recently finished jobs, and 22.05 ignores its own state filter)."""
    wanted = set(states) if states is not None else None
    if wanted is None:
        return [j for j in jobs if not (j.state.finished or j.state is JobState.OTHER)]
    return [j for j in jobs if j.state in wanted]


def json_errors_text(doc: Mapping[str, Any]) -> str:
    """The ``errors`` of a --json document as one line (error, description, source)."""
    parts = []
    for e in doc.get("errors") or []:
        if isinstance(e, Mapping):
            bits = [str(e.get(k)) for k in ("error", "description", "source") if e.get(k)]
            parts.append(" / ".join(bits) or str(e))
        else:
            parts.append(str(e))
    return "; ".join(parts)


def _raise_json_errors(doc: Mapping[str, Any], what: str) -> None:
    if doc.get("errors"):
        raise SlurmError(f"{what}: {json_errors_text(doc)}")


_NODE_DOWN = ("down", "drain", "fail", "not_responding", "unknown", "future", "power")


def node_from_sinfo(raw: Mapping[str, Any], switch: str | None = None) -> Node:
    """One node record: 22.05's ``sinfo --json`` or 23.02+'s ``scontrol show nodes --json``."""
    raw = node_record(raw)
    gpus, gtype = parse_node_gres(raw.get("gres"))
    used, _ = parse_node_gres(raw.get("gres_used"))
    state = str(raw.get("state") or "unknown")
    flags = [str(f).lower() for f in raw.get("state_flags") or []]
    words = [state.lower(), *flags]
    available = not any(w.startswith(bad) for w in words for bad in _NODE_DOWN)
    full_state = "+".join([state.upper(), *(f.upper() for f in flags)])
    return Node(
        name=str(raw["name"]),
        gpus=gpus,
        gpu_type=gtype,
        gpus_used=used,
        cpus=_num(raw.get("cpus")) or 0,
        memory_mb=_num(raw.get("real_memory")) or 0,
        switch=switch,
        partitions=tuple(raw.get("partitions") or ()),
        state=full_state,
        available=available,
    )


def parse_sinfo_json(doc: Mapping[str, Any], topology: Topology | None = None) -> list[Node]:
    """Nodes of a ``sinfo --json`` document, each with its leaf switch when a topology is given."""
    _raise_json_errors(doc, "sinfo --json")
    if "meta" in doc:
        dialect_of(doc, "node list --json")
    leaf = topology.leaf_of() if topology is not None else {}
    return [node_from_sinfo(raw, leaf.get(str(raw.get("name")))) for raw in doc.get("nodes") or []]


_FIELD = re.compile(r"(\w+)=(\S*)")


def parse_scontrol_records(text: str) -> list[dict[str, str]]:
    """``scontrol -o show …`` output: one ``Key=Value`` record per line."""
    return [dict(_FIELD.findall(line)) for line in text.splitlines() if "=" in line]


def job_end_from_scontrol(text: str, job_id: int) -> JobEnd:
    """``scontrol -o show job N`` (times as epoch seconds, ``SLURM_TIME_FORMAT=%s``) → JobEnd."""
    rec = next((r for r in parse_scontrol_records(text) if r.get("JobId") == str(job_id)), None)
    if rec is None:
        raise SlurmError(f"scontrol show job {job_id}: no record of the job in its output")
    code, _, sig = (rec.get("ExitCode") or "0:0").partition(":")
    end = rec.get("EndTime", "")
    return JobEnd(
        state=JobState.parse(rec.get("JobState", "")),
        exit_signal=int(sig) if sig.isdigit() else 0,
        exit_code=int(code) if code.isdigit() else 0,
        end_time=float(end) if end.isdigit() and int(end) > 0 else None,
        restarts=int(rec["Restarts"]) if rec.get("Restarts", "").isdigit() else 0,
    )


def _duration_s(text: str | None) -> float | None:
    """Slurm time ``[days-]hours:minutes:seconds`` / ``minutes`` -> seconds; UNLIMITED -> None."""
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A"):
        return None
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 1:
        h, m, s = 0, parts[0], 0
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = parts[-3], parts[-2], parts[-1]
    return float(((days * 24 + h) * 60 + m) * 60 + s)


def parse_partitions(text: str) -> list[Partition]:
    """``scontrol -o show partition`` -> partitions."""
    out = []
    for rec in parse_scontrol_records(text):
        if "PartitionName" not in rec:
            continue
        out.append(
            Partition(
                name=rec["PartitionName"],
                nodes=_nodes(rec.get("Nodes")),
                max_time_s=_duration_s(rec.get("MaxTime")),
                default=rec.get("Default", "NO").upper() == "YES",
                state=rec.get("State", "UP"),
            )
        )
    return out


def parse_topology(text: str) -> Topology:
    """``scontrol show topology`` -> Topology. Leaf switches list nodes; upper ones list switches
    (Slurm also prints the nodes under an upper switch: those are kept only for leaves)."""
    switches = []
    for rec in parse_scontrol_records(text):
        if "SwitchName" not in rec:
            continue
        children = _nodes(rec.get("Switches"))
        level = int(rec.get("Level", "0") or 0)
        nodes = _nodes(rec.get("Nodes")) if (level == 0 or not children) else ()
        switches.append(Switch(name=rec["SwitchName"], nodes=nodes, switches=children))
    return Topology(tuple(switches))
