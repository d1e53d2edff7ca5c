"""sbatch-style arguments → the job description the Lua shim would send (for ``filter check``
and ``dlsubmit --dry-run``). Pure: no clock; relative deadlines need ``now``.

Every sbatch option is accepted (:mod:`.sbatch_options` has the list and how they are read). The
options whose job_desc fields the filter reads are encoded as slurmctld hands them to
job_submit.lua (SLURM-FACTS.md): ``--gres=gpu:h100:2`` → ``tres_per_node="gres:gpu:h100:2"``,
``--gpus=3`` → ``tres_per_job="gres:gpu:3"``, unset numbers → NO_VAL, ``--exclusive[=user|mcs|topo]``
→ ``shared`` 0/2/3/4 and ``-s`` → 1, ``--ntasks-per-gpu`` → ``ntasks_per_tres``. The rest are
listed in :attr:`SbatchJob.ignored`. Two fields job_submit.lua does not show: ``deadline`` (Unix
seconds; Slurm 22.05 hides ``job_desc.deadline``, so live jobs carry ``dl:deadline=…``) and
``signal``, the raw ``--signal`` text (no release through 26.05 exposes warn_signal/warn_time).
A heterogeneous job (``:`` between components) gives one job_desc per component, as slurmctld
calls job_submit.lua once per component: ``het_job_offset`` 0, 1, … and only the first carries
the script (``has_script``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..units import time_seconds
from ..hints import parse_deadline
from .request import INFINITE16, NO_VAL, NO_VAL16
from .sbatch_options import GivenOption, OptionError, split_args

_MEM = re.compile(r"^(\d+)([KMGT]?)B?$", re.IGNORECASE)
_REL = re.compile(r"^now\+(\d+)(seconds?|minutes?|hours?|days?)?$")
_SIGNALS = {
    "HUP",
    "INT",
    "QUIT",
    "ABRT",
    "KILL",
    "ALRM",
    "TERM",
    "CHLD",
    "USR1",
    "USR2",
    "PIPE",
    "URG",
    "CONT",
    "STOP",
    "TSTP",
    "TTIN",
    "TTOU",
    "XCPU",
}
_SHARED = {"exclusive": 0, "oversubscribe": 1, "user": 2, "mcs": 3, "topo": 4}


class SbatchArgsError(ValueError):
    """An argument ``filter check`` cannot read: says which and why."""


def parse_time_minutes(text: str) -> int:
    """Slurm time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S → whole minutes (rounded up)."""
    t = text.strip().lower()
    if t in ("infinite", "unlimited"):
        return 0xFFFFFFFF
    seconds = time_seconds(t)
    if seconds is None:
        raise SbatchArgsError(f"--time={text!r}: expected M, M:S, H:M:S, D-H, D-H:M or D-H:M:S")
    return -(-seconds // 60)


def parse_mem_mb(text: str) -> int:
    m = _MEM.match(text.strip())
    if not m:
        raise SbatchArgsError(
            f"memory {text!r}: expected a number with an optional K, M, G or T suffix"
        )
    scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2).upper()]
    return max(1, int(int(m.group(1)) * scale))


def _deadline(text: str, now: float | None) -> int:
    m = _REL.match(text.strip().lower())
    if m:
        if now is None:
            raise SbatchArgsError(
                f"--deadline={text!r}: a relative deadline needs the current time"
            )
        unit = (m.group(2) or "seconds").rstrip("s")
        return (
            int(now)
            + int(m.group(1)) * {"second": 1, "minute": 60, "hour": 3600, "day": 86400}[unit]
        )
    value = parse_deadline(text)
    if value is None:
        raise SbatchArgsError(f"--deadline={text!r}: expected YYYY-MM-DDTHH:MM[:SS] or now+N<unit>")
    return value


def _count(value: str, what: str = "a count", least: int = 1) -> int:
    """A whole number of at least ``least``, as sbatch requires (``-n 0`` and ``-c 0`` it refuses)."""
    text = value.strip()
    if not text.isdigit() or int(text) < least:
        raise ValueError(f"expected {what} of {least} or more")
    return int(text)


def _gpu_spec(value: str) -> str:
    """``[type:]count``. sbatch passes any integer through (even ``-1``); the rules judge it."""
    gtype, _, count = value.rpartition(":")
    if not re.match(r"^-?\d+$", count.strip()) or (
        gtype and not re.match(r"^[A-Za-z0-9_.-]+$", gtype)
    ):
        raise ValueError("expected [TYPE:]COUNT")
    return value


def _signal(value: str) -> str:
    """``[{R|B}:]SIG[@TIME]`` checked as sbatch checks it; the text is kept as given."""
    rest = value
    for flag in "RBR":
        if rest[:1].upper() == flag:
            rest = rest[1:]
    rest = rest.removeprefix(":")
    sig, at, secs = rest.partition("@")
    name = sig.strip().upper().removeprefix("SIG")
    number = int(sig) if re.fullmatch(r"\s*[+-]?\d+\s*", sig) else None
    if not (name in _SIGNALS or (number is not None and 1 <= number <= 0xFFFF)):
        raise ValueError("expected [{R|B}:]SIGNAL[@SECONDS], e.g. B:USR2@90")
    if at and not (
        re.fullmatch(r"\s*\+?\d*", secs) and int("0" + secs.strip().lstrip("+")) <= 0xFFFF
    ):
        raise ValueError("the time after @ must be 0 to 65535 seconds")
    return value


@dataclass(frozen=True, slots=True)
class IgnoredOption:
    """An option ``filter check`` accepts but does not encode, and why."""

    option: str
    why: str = ""

    def __post_init__(self) -> None:
        if not self.why:
            object.__setattr__(self, "why", "the filter's decision does not depend on it")

    def line(self) -> str:
        """One line for people, within 80 columns (a long script path is shortened)."""
        shown = self.option if len(self.option) <= 24 else "..." + self.option[-21:]
        return f"ignored {shown}: {self.why}"


_WHY = {
    "uid": "the job is checked as the submitting user",
    "help": "sbatch would only print text",
    "usage": "sbatch would only print text",
    "version": "sbatch would only print text",
}


@dataclass(frozen=True, slots=True)
class SbatchJob:
    """What sbatch would send: one job_desc per component (one for a plain job), and the options
    and script left out of them."""

    components: tuple[dict[str, Any], ...]
    ignored: tuple[IgnoredOption, ...]
    script: str | None = None


class _Component:
    """One job component being read: its job_desc and which options set it (for sbatch's checks)."""

    def __init__(self, base: dict[str, Any]) -> None:
        self.desc = dict(base)
        self.given: dict[str, str] = {}
        self.gpus_per_node: str | None = None
        self.gres: str | None = None
        self.hint: list[str] = []
        self.overcommit = False
        self.ntasks_per_tres: dict[str, int] = {}


def _set(
    field: str, convert: Callable[[str], Any]
) -> Callable[[_Component, str, float | None], None]:
    def apply(c: _Component, value: str, now: float | None) -> None:
        c.desc[field] = convert(value)

    return apply


def _nodes(c: _Component, value: str, now: float | None) -> None:
    lo, _, hi = value.partition("-")
    c.desc["min_nodes"] = _count(lo, "a node count", 0)
    c.desc["max_nodes"] = _count(hi or lo, "a node count", 0)
    if c.desc["max_nodes"] < c.desc["min_nodes"]:
        raise ValueError("the node range's maximum is below its minimum")


def _time(c: _Component, value: str, now: float | None) -> None:
    minutes = parse_time_minutes(value)
    c.desc["time_limit"] = minutes if minutes else 0xFFFFFFFF  # sbatch: 0 means no limit


def _switches(c: _Component, value: str, now: float | None) -> None:
    count, _, wait = value.partition("@")
    c.desc["req_switch"] = int(count)
    if wait:
        c.desc["wait4switch"] = parse_time_minutes(wait) * 60


def _requeue(c: _Component, value: str | None, now: float | None) -> None:
    if value and value.strip().lower() != "expedite":
        raise ValueError("expected --requeue or --requeue=expedite")
    c.desc["requeue"] = 1


def _extra_node_info(c: _Component, value: str, now: float | None) -> None:
    parts = value.split(":")
    if len(parts) > 3 or not all(re.fullmatch(r"(\*|\d+(-\d+)?)?", p.strip()) for p in parts):
        raise ValueError("expected SOCKETS[:CORES[:THREADS]], each a number, MIN-MAX or *")
    sockets = parts[0].strip()
    if sockets not in ("", "*"):
        c.desc["sockets_per_node"] = int(sockets.split("-")[0])


def _hint(c: _Component, value: str, now: float | None) -> None:
    words = [w.strip().lower() for w in re.split(r",(?!\d)", value)]
    bad = [
        w
        for w in words
        if w not in ("compute_bound", "memory_bound", "multithread", "nomultithread")
    ]
    if bad:
        raise ValueError("expected compute_bound, memory_bound, multithread or nomultithread")
    c.hint = words


def _tres_per_task(c: _Component, value: str, now: float | None) -> None:
    """24.11+: written ``gres/`` as sbatch rewrites it; ``cpu=N`` is also ``--cpus-per-task``."""
    items = [("gres/" + i[5:]) if i.startswith("gres:") else i for i in value.split(",")]
    c.desc["tres_per_task"] = ",".join(items)
    for item in items:
        if item.startswith("cpu="):
            c.desc.setdefault("cpus_per_task", _count(item[4:], "a CPU count"))


def _exclusive(c: _Component, value: str | None, now: float | None) -> None:
    key = (value or "exclusive").strip().lower()
    if key not in _SHARED:
        raise ValueError("expected --exclusive, or --exclusive=user, mcs or topo")
    c.desc["shared"] = _SHARED[key]


def _ntasks_per(option: str) -> Callable[[_Component, str, float | None], None]:
    """--ntasks-per-gpu and --ntasks-per-tres both set ``ntasks_per_tres``."""

    def apply(c: _Component, value: str, now: float | None) -> None:
        c.ntasks_per_tres[option] = c.desc["ntasks_per_tres"] = _count(value)

    return apply


def _gres(c: _Component, value: str, now: float | None) -> None:
    c.gres = (
        None
        if value.strip().lower() == "none"
        else ("gres:" + value).replace(",", ",gres:").replace("gres:gres:", "gres:")
    )


def _gpus_per_node(c: _Component, value: str, now: float | None) -> None:
    c.gpus_per_node = "gres:gpu:" + _gpu_spec(value)


_READ: dict[str, Callable[[_Component, Any, float | None], None]] = {
    "gpus": _set("tres_per_job", lambda v: "gres:gpu:" + _gpu_spec(v)),
    "gres": _gres,
    "gpus-per-node": _gpus_per_node,
    "gpus-per-task": _set("tres_per_task", lambda v: "gres:gpu:" + _gpu_spec(v)),
    "gpus-per-socket": _set("tres_per_socket", lambda v: "gres:gpu:" + _gpu_spec(v)),
    "tres-per-task": _tres_per_task,
    "nodes": _nodes,
    "ntasks": _set("num_tasks", _count),
    "ntasks-per-node": _set("ntasks_per_node", _count),
    "tasks-per-node": _set("ntasks_per_node", _count),
    "ntasks-per-gpu": _ntasks_per("--ntasks-per-gpu"),
    "ntasks-per-tres": _ntasks_per("--ntasks-per-tres"),
    "ntasks-per-socket": _set("ntasks_per_socket", _count),
    "ntasks-per-core": _set("ntasks_per_core", _count),
    "sockets-per-node": _set("sockets_per_node", _count),
    "extra-node-info": _extra_node_info,
    "hint": _hint,
    "cpus-per-task": _set("cpus_per_task", _count),
    "mincpus": _set("pn_min_cpus", _count),
    "mem": _set("min_mem_per_node", lambda v: 0 if v.strip() == "0" else parse_mem_mb(v)),
    "mem-per-cpu": _set("min_mem_per_cpu", parse_mem_mb),
    "cpus-per-gpu": _set("cpus_per_tres", lambda v: f"gres:gpu:{_count(v)}"),
    "mem-per-gpu": _set("mem_per_tres", lambda v: f"gres:gpu:{parse_mem_mb(v)}"),
    "time": _time,
    "partition": _set("partition", str),
    "constraint": _set("features", str),
    "qos": _set("qos", str),
    "account": _set("account", str),
    "job-name": _set("name", str),
    "comment": _set("comment", str),
    "array": _set("array_inx", str),
    "deadline": lambda c, v, now: c.desc.__setitem__("deadline", _deadline(v, now)),
    "switches": _switches,
    "requeue": _requeue,
    "no-requeue": lambda c, v, now: c.desc.__setitem__("requeue", 0),
    "signal": _set("signal", _signal),
    "overcommit": lambda c, v, now: setattr(c, "overcommit", True),
    "exclusive": _exclusive,
    "oversubscribe": lambda c, v, now: c.desc.__setitem__("shared", _SHARED["oversubscribe"]),
}


def _apply(c: _Component, given: GivenOption, now: float | None) -> None:
    name, value = given.option.name, given.value
    if value is not None and len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]  # #SBATCH --opt="value": sbatch strips the quotes
    c.given[name] = given.given
    try:
        _READ[name](c, value, now)
    except SbatchArgsError:
        raise
    except ValueError as e:
        raise SbatchArgsError(
            f"{given.given}={value!r}: {e}" if value is not None else f"{given.given}: {e}"
        ) from None


def reads(name: str) -> bool:
    """Whether the filter's job description depends on this option (its long name, no dashes)."""
    return name in _READ


def parse_sbatch_components(
    args: Sequence[str], *, user_name: str = "", user_id: int = 0, now: float | None = None
) -> SbatchJob:
    """The job_desc of each component of the job these sbatch arguments submit, and what was left out.
    Options sbatch does not know, and combinations it refuses, raise SbatchArgsError."""
    try:
        split = split_args(list(args))
    except OptionError as e:
        raise SbatchArgsError(str(e)) from None
    base = {
        "user_name": user_name,
        "user_id": user_id,
        "time_limit": NO_VAL,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "req_switch": NO_VAL,
        "wait4switch": NO_VAL,
        "has_script": True,
    }
    ignored: dict[str, IgnoredOption] = {}
    components = []
    for index, given_opts in enumerate(split.components):
        c = _Component(base)
        for given in given_opts:
            if reads(given.option.name):
                _apply(c, given, now)
            else:
                flag = given.option.flag
                ignored.setdefault(flag, IgnoredOption(flag, _WHY.get(given.option.name, "")))
        _derive(c)
        if len(split.components) > 1:
            c.desc["het_job_offset"] = index
            c.desc["has_script"] = index == 0
        components.append(c.desc)
    if split.script is not None:
        if any(g.option.name == "wrap" for comp in split.components for g in comp):
            raise SbatchArgsError(
                "--wrap and a batch script exclude each other (sbatch refuses both)"
            )
        ignored[split.script] = IgnoredOption(split.script, "its #SBATCH lines are not read here")
    return SbatchJob(tuple(components), tuple(ignored.values()), split.script)


def parse_sbatch_args(
    args: Sequence[str], *, user_name: str = "", user_id: int = 0, now: float | None = None
) -> dict[str, Any]:
    """The job_desc fields for these sbatch arguments (one job; see parse_sbatch_components for
    heterogeneous ones). Unknown options raise SbatchArgsError."""
    job = parse_sbatch_components(args, user_name=user_name, user_id=user_id, now=now)
    if len(job.components) > 1:
        raise SbatchArgsError("':' makes a heterogeneous job; give the options of one component")
    return job.components[0]


def _derive(c: _Component) -> None:
    """What sbatch itself works out before slurmctld sees the job (GRES per node, CPUs from tasks,
    --hint), and the combinations it refuses."""
    desc, given = c.desc, c.given
    per_node = ",".join(x for x in (c.gpus_per_node, c.gres) if x)
    if per_node:
        desc["tres_per_node"] = per_node
    if sum(k in given for k in ("mem", "mem-per-cpu", "mem-per-gpu")) > 1:
        raise SbatchArgsError("--mem, --mem-per-cpu and --mem-per-gpu exclude each other")
    _check_ntasks_per_gpu(c)
    if c.hint and not any(
        k in given for k in ("ntasks-per-core", "threads-per-core", "extra-node-info")
    ):
        if "compute_bound" in c.hint:
            desc.pop("sockets_per_node", None)
        if "multithread" in c.hint:
            desc["ntasks_per_core"] = INFINITE16
    if desc.get("tres_per_socket") and "sockets_per_node" not in desc:
        raise SbatchArgsError(
            "--gpus-per-socket needs --sockets-per-node (sbatch refuses it without)"
        )
    if "tres-per-task" in given and "cpu=" in desc["tres_per_task"] and "cpus-per-task" in given:
        raise SbatchArgsError("--tres-per-task=cpu= and --cpus-per-task exclude each other")
    cpt = desc.get("cpus_per_task")
    tasks = desc.get("num_tasks")
    if cpt is not None:
        desc["pn_min_cpus"] = max(desc.get("pn_min_cpus", 0), cpt)
    if c.overcommit:
        nodes = desc["min_nodes"] if desc["min_nodes"] != NO_VAL else 1
        desc["min_cpus"] = max(nodes, 1)
    elif cpt is not None or tasks is not None:
        desc["min_cpus"] = (cpt or 1) * (tasks or 1)


def _check_ntasks_per_gpu(c: _Component) -> None:
    if not c.ntasks_per_tres:
        return
    if len(set(c.ntasks_per_tres.values())) > 1:
        raise SbatchArgsError(
            "--ntasks-per-gpu and --ntasks-per-tres disagree (sbatch refuses that)"
        )
    for other in (
        "gpus-per-task",
        "gpus-per-socket",
        "ntasks-per-node",
        "tasks-per-node",
        "tres-per-task",
    ):
        if other in c.given:
            raise SbatchArgsError(
                f"{c.given[other]} and --ntasks-per-gpu exclude each other (sbatch refuses both)"
            )
