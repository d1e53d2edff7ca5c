"""The job description the filter sees, decoded from slurmctld's ``job_desc`` encodings.

The Lua shim sends ``job_desc`` fields as one JSON object; :func:`JobRequest.from_job_desc`
turns Slurm's sentinels (``NO_VAL`` = 4294967294, ``NO_VAL16`` = 65534, ``NO_VAL64``) into
``None`` and the GRES strings into GPU counts. It accepts any mapping and never raises:
a value of the wrong type counts as "not given" and is reported in ``problems``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ..hints import read_hints

NO_VAL = 4294967294
INFINITE = 4294967295
NO_VAL16 = 65534
INFINITE16 = 65535
_BIG = 2**32 - 2  # anything at or above is a sentinel for 32/64-bit fields

# Every job_desc field the rules read (the shim sends these; SLURM-FACTS.md has the encodings).
JOB_DESC_FIELDS = (
    "account",
    "admin_comment",
    "array_inx",
    "comment",
    "cpus_per_tres",
    "mem_per_tres",
    "min_nodes",
    "max_nodes",
    "name",
    "partition",
    "req_switch",
    "wait4switch",
    "requeue",
    "time_limit",
    "tres_per_job",
    "tres_per_node",
    "tres_per_socket",
    "tres_per_task",
    "user_id",
    "user_name",
    "has_script",
    "deadline",
    "qos",
    "num_tasks",
    "ntasks_per_node",
    "sockets_per_node",
    "cpus_per_task",
    "min_cpus",
    "pn_min_cpus",
    "min_mem_per_node",
    "min_mem_per_cpu",
    "shared",
    "default_account",
    "default_qos",
    "ntasks_per_tres",
    "het_job_offset",
    "het_leader_tag",
    "script_head",
    "features",
)
MAX_COUNT_DIGITS = 9  # a GPU count with more digits is unreadable, not a huge number

# job_desc.shared: 0 --exclusive, 1 --oversubscribe, 2 --exclusive=user, 3 =mcs, 4 =topo (24.11+).
# Every value but 1 (and unset) holds whole nodes.
EXCLUSIVE_SHARED = frozenset({0, 2, 3, 4})

_GPU_GRES = re.compile(r"^(?:gres[:/])?gpu(?::((?!-)[^:,]+))?(?::([0-9]+))?$")
_SHARD_GRES = re.compile(r"^(?:gres[:/])?shard(?::((?!-)[^:,]+))?(?::([0-9]+))?$")
_SHARD_NAME = re.compile(r"^(?:gres[:/])?shard(?:[:=]|$)")


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """One GPU request in a TRES string: ``gres:gpu:h100:2`` → GpuAsk("h100", 2)."""

    gpu_type: str | None
    count: int


def parse_gpu_tres(text: str | None) -> tuple[list[GpuAsk], list[str]]:
    """GPU asks in a TRES list (``gres:gpu:h100:2,gres:foo:1``) and the non-GPU items kept aside."""
    if not text:
        return [], []
    asks, others = _parse_gpu_tres(text)
    return list(asks), list(others)


def _read_ask(item: str, pattern: re.Pattern) -> GpuAsk | None:
    """One TRES item (``gres:gpu:h100:2``; 23.02+ may write ``gres/gpu=4``) as an ask of the
    GRES ``pattern`` names, or None when it does not read as one (a count of more than
    :data:`MAX_COUNT_DIGITS` digits included: no site has that many, the rules judge it)."""
    if "=" in item:
        name, _, num = item.partition("=")
        item = f"{name}:{num}" if num.isascii() and num.isdigit() else item
    m = pattern.match(item)
    if not m:
        return None
    kind, count = m.group(1), m.group(2)
    if kind is not None and kind.isascii() and kind.isdigit() and count is None:
        kind, count = None, kind  # gres:gpu:2
    if count is not None and len(count) > MAX_COUNT_DIGITS:
        return None
    return GpuAsk(kind, int(count) if count is not None else 1)


@functools.lru_cache(maxsize=1024)
def _parse_gpu_tres(text: str) -> tuple[tuple[GpuAsk, ...], tuple[str, ...]]:
    return _split_asks(text, _GPU_GRES)


def parse_shard_tres(text: str | None) -> tuple[list[GpuAsk], list[str]]:
    """GPU shard asks in a TRES list (``gres:shard:2``, ``gres/shard=2``, ``gres/shard:h100:2``)
    and the shard items that cannot be read (a count of more than 9 digits, a bad form)."""
    asks, bad = _parse_shard_tres(text or "")
    return list(asks), list(bad)


@functools.lru_cache(maxsize=1024)
def _parse_shard_tres(text: str) -> tuple[tuple[GpuAsk, ...], tuple[str, ...]]:
    return _split_asks(text, _SHARD_GRES, only=_SHARD_NAME)


def _split_asks(
    text: str, pattern: re.Pattern, only: re.Pattern | None = None
) -> tuple[tuple[GpuAsk, ...], tuple[str, ...]]:
    """The asks of a TRES list that ``pattern`` reads, and its other items (``only``: look at
    the items it matches alone, the others left out)."""
    asks: list[GpuAsk] = []
    rest: list[str] = []
    for item in text.split(","):
        item = item.strip()
        if not item or (only is not None and not only.match(item)):
            continue
        ask = _read_ask(item, pattern)
        if ask is None:
            rest.append(item)
        else:
            asks.append(ask)
    return tuple(asks), tuple(rest)


def _num(v: Any, sentinel_at: int = _BIG) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if v != v or v in (float("inf"), float("-inf")):
        return None
    iv = int(v)
    if iv < 0 or iv >= sentinel_at:
        return None
    return iv


def _num16(v: Any) -> int | None:
    return _num(v, NO_VAL16)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v != "" else None


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A submitted job as the rules see it. ``None`` means the user did not set it."""

    user_name: str | None = None
    user_id: int | None = None
    name: str | None = None
    account: str | None = None
    partition: str | None = None
    comment: str | None = None
    admin_comment: str | None = None
    array: str | None = None
    time_limit_min: int | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None
    tres_per_job: str | None = None
    tres_per_node: str | None = None
    tres_per_socket: str | None = None
    tres_per_task: str | None = None
    cpus_per_tres: str | None = None
    mem_per_tres: str | None = None
    req_switch: int | None = None
    wait4switch: int | None = None
    requeue: int | None = None
    has_script: bool = True
    deadline: int | None = None
    time_unlimited: bool = False
    qos: str | None = None
    default_account: str | None = None
    default_qos: str | None = None
    num_tasks: int | None = None
    ntasks_per_node: int | None = None
    sockets_per_node: int | None = None
    cpus_per_task: int | None = None
    min_cpus: int | None = None
    pn_min_cpus: int | None = None
    mem_per_node_mb: int | None = None  # 0: the whole node's memory (--mem=0)
    mem_per_cpu_mb: int | None = None
    exclusive: bool = False
    ntasks_per_tres: int | None = None  # --ntasks-per-gpu
    het_offset: int | None = None  # component of a heterogeneous job (None: not one)
    het_leader_tag: str | None = None  # the tag the filter gave the first component
    script_head: str | None = None  # the batch script's first 64 KiB (None: not sent)
    features: str | None = None  # --constraint
    problems: tuple[str, ...] = field(default=())
    hints: Mapping[str, str] = field(init=False, repr=False, compare=False)
    """The ``dl:`` hints of its comment (:func:`~slurm_dl.core.hints.parse_hints`), read once."""
    repeated_hints: Mapping[str, list[str]] = field(init=False, repr=False, compare=False)
    """Hints its comment gives twice with different values (:func:`~slurm_dl.core.hints.repeated_hints`)."""

    def __post_init__(self) -> None:
        first, repeated = read_hints(self.comment)
        object.__setattr__(self, "hints", MappingProxyType(first))
        object.__setattr__(self, "repeated_hints", MappingProxyType(repeated))

    @classmethod
    def from_job_desc(cls, desc: Mapping[str, Any]) -> "JobRequest":
        if not isinstance(desc, Mapping):
            return cls(problems=("job description is not an object",))
        problems: list[str] = []

        def s(key: str) -> str | None:
            v = desc.get(key)
            if v is not None and not isinstance(v, str):
                problems.append(f"{key}: expected text, got {type(v).__name__}")
            return _str(v)

        time_limit = _num(desc.get("time_limit"))
        if desc.get("time_limit") == INFINITE:
            time_limit = None
        has_script = desc.get("has_script")
        return cls(
            user_name=s("user_name"),
            user_id=_num(desc.get("user_id")),
            name=s("name"),
            account=s("account"),
            partition=s("partition"),
            comment=s("comment"),
            admin_comment=s("admin_comment"),
            array=s("array_inx"),
            time_limit_min=time_limit,
            min_nodes=_num(desc.get("min_nodes")),
            max_nodes=_num(desc.get("max_nodes")),
            tres_per_job=s("tres_per_job"),
            tres_per_node=s("tres_per_node"),
            tres_per_socket=s("tres_per_socket"),
            tres_per_task=s("tres_per_task"),
            cpus_per_tres=s("cpus_per_tres"),
            mem_per_tres=s("mem_per_tres"),
            req_switch=_num(desc.get("req_switch")),
            wait4switch=_num(desc.get("wait4switch")),
            requeue=_num16(desc.get("requeue")),
            has_script=has_script if isinstance(has_script, bool) else True,
            deadline=_num(desc.get("deadline"), 10**11) or None,
            time_unlimited=desc.get("time_limit") == INFINITE,
            qos=s("qos"),
            default_account=s("default_account"),
            default_qos=s("default_qos"),
            num_tasks=_num(desc.get("num_tasks")),
            ntasks_per_node=_num16(desc.get("ntasks_per_node")),
            sockets_per_node=_num16(desc.get("sockets_per_node")),
            cpus_per_task=_num16(desc.get("cpus_per_task")),
            min_cpus=_num(desc.get("min_cpus")),
            pn_min_cpus=_num16(desc.get("pn_min_cpus")),
            mem_per_node_mb=_num(desc.get("min_mem_per_node")),
            mem_per_cpu_mb=_num(desc.get("min_mem_per_cpu")),
            exclusive=_num16(desc.get("shared")) in EXCLUSIVE_SHARED,
            ntasks_per_tres=_num16(desc.get("ntasks_per_tres")),
            het_offset=_num(desc.get("het_job_offset")),
            het_leader_tag=s("het_leader_tag"),
            script_head=s("script_head"),
            features=s("features"),
            problems=tuple(problems),
        )

    # --- derived views -----------------------------------------------------------------
    @property
    def gpus_per_job(self) -> list[GpuAsk]:
        return parse_gpu_tres(self.tres_per_job)[0]

    @property
    def gpus_per_node(self) -> list[GpuAsk]:
        return parse_gpu_tres(self.tres_per_node)[0]

    @property
    def all_gpu_asks(self) -> list[GpuAsk]:
        out: list[GpuAsk] = []
        for text in (
            self.tres_per_job,
            self.tres_per_node,
            self.tres_per_socket,
            self.tres_per_task,
        ):
            out.extend(parse_gpu_tres(text)[0])
        return out

    @property
    def nodes(self) -> int:
        """Nodes asked for (at least one)."""
        return max(1, self.min_nodes or 1)

    @property
    def gpus_per_task(self) -> list[GpuAsk]:
        return parse_gpu_tres(self.tres_per_task)[0]

    @property
    def gpus_per_socket(self) -> list[GpuAsk]:
        return parse_gpu_tres(self.tres_per_socket)[0]

    @property
    def tasks(self) -> int:
        """Tasks of the whole job: the most of ``-n``, ``--ntasks-per-node`` × nodes and
        ``--ntasks-per-gpu`` × GPUs; one when none is given."""
        per_gpu = 0
        if self.ntasks_per_tres:
            per_gpu = self.ntasks_per_tres * (
                sum(a.count for a in self.gpus_per_job)
                + sum(a.count for a in self.gpus_per_node) * self.nodes
            )
        return max(self.num_tasks or 0, (self.ntasks_per_node or 0) * self.nodes, per_gpu, 1)

    @property
    def total_gpus(self) -> int:
        """GPUs for the whole job, from every form Slurm accepts: per job, per node × nodes,
        per task × tasks, per socket × sockets per node × nodes."""
        per_job = sum(a.count for a in self.gpus_per_job)
        per_node = sum(a.count for a in self.gpus_per_node) * self.nodes
        per_task = sum(a.count for a in self.gpus_per_task) * self.tasks
        per_socket = (
            sum(a.count for a in self.gpus_per_socket) * (self.sockets_per_node or 1) * self.nodes
        )
        return per_job + per_node + per_task + per_socket

    @property
    def gpus_on_one_node(self) -> int | None:
        """GPUs the job needs on each of its nodes, when its request says (else None)."""
        per_node = sum(a.count for a in self.gpus_per_node)
        per_task = sum(a.count for a in self.gpus_per_task)
        per_socket = sum(a.count for a in self.gpus_per_socket) * (self.sockets_per_node or 1)
        if per_task and self.ntasks_per_node:
            per_node += per_task * self.ntasks_per_node
        elif per_task and self.num_tasks and self.min_nodes and self.max_nodes == self.min_nodes:
            per_node += per_task * -(-self.num_tasks // self.min_nodes)
        elif per_task:
            per_node += per_task  # at least one task's GPUs sit on one node
        return (per_node + per_socket) or None

    @property
    def cpus_asked(self) -> int:
        """CPUs of the whole job, whichever option set them (1 when none did)."""
        nodes = self.nodes
        cpus = max(
            self.min_cpus or 0,
            (self.pn_min_cpus or 0) * nodes,
            (self.cpus_per_task or 1) * self.tasks,
            (self.per_gpu_value(self.cpus_per_tres) or 0) * self.total_gpus,
            1,
        )
        return cpus

    @property
    def gpu_type(self) -> str | None:
        types = {a.gpu_type for a in self.all_gpu_asks if a.gpu_type}
        return next(iter(types)) if len(types) == 1 else None

    def per_gpu_value(self, text: str | None) -> int | None:
        """``cpus_per_tres``/``mem_per_tres`` (``gres:gpu:4``; 23.02+: ``gres/gpu:4``) → 4."""
        for item in (text or "").split(","):
            parts = item.strip().replace("gres/", "gres:", 1).split(":")
            if len(parts) >= 2 and parts[-2] == "gpu" and parts[-1].isdigit():
                return int(parts[-1])
        return None

    def original_request(self) -> str:
        """A short text of what the user asked for, for the tag and the log."""
        bits = []
        if self.tres_per_job:
            bits.append("job." + self.tres_per_job.removeprefix("gres:"))
        if self.tres_per_node:
            bits.append("node." + self.tres_per_node.removeprefix("gres:"))
        if self.tres_per_task:
            bits.append("task." + self.tres_per_task.removeprefix("gres:"))
        if self.tres_per_socket:
            bits.append("socket." + self.tres_per_socket.removeprefix("gres:"))
        if self.num_tasks:
            bits.append(f"n{self.num_tasks}")
        if self.min_nodes:
            bits.append(f"N{self.min_nodes}")
        return "+".join(bits) or "cpu"
