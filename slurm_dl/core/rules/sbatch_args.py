"""sbatch-style arguments → the job description the Lua shim would send (for ``filter check``
and ``dlsubmit --dry-run``). Pure: no clock; relative deadlines need ``now``.

Encodings follow what slurmctld hands job_submit.lua (SLURM-FACTS.md): ``--gres=gpu:h100:2`` →
``tres_per_node="gres:gpu:h100:2"``, ``--gpus=3`` → ``tres_per_job="gres:gpu:3"``, unset numbers
→ NO_VAL. ``--deadline`` goes to ``deadline`` (Unix seconds); note that Slurm 22.05 does not
show ``job_desc.deadline`` to job_submit.lua, so live jobs carry deadlines as ``dl:deadline=…``.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from ..units import time_seconds
from .hints import parse_deadline
from .request import NO_VAL, NO_VAL16

_MEM = re.compile(r"^(\d+)([KMGT]?)B?$", re.IGNORECASE)
_REL = re.compile(r"^now\+(\d+)(seconds?|minutes?|hours?|days?)?$")


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
        raise SbatchArgsError(f"memory {text!r}: expected a number with an optional K, M, G or T suffix")
    scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2).upper()]
    return max(1, int(int(m.group(1)) * scale))


def _deadline(text: str, now: float | None) -> int:
    m = _REL.match(text.strip().lower())
    if m:
        if now is None:
            raise SbatchArgsError(f"--deadline={text!r}: a relative deadline needs the current time")
        unit = (m.group(2) or "seconds").rstrip("s")
        return int(now) + int(m.group(1)) * {"second": 1, "minute": 60, "hour": 3600, "day": 86400}[unit]
    value = parse_deadline(text)
    if value is None:
        raise SbatchArgsError(f"--deadline={text!r}: expected YYYY-MM-DDTHH:MM[:SS] or now+N<unit>")
    return value


def _gpu_tres(spec: str) -> str:
    """``--gpus``/``--gpus-per-node`` value (``h100:2`` or ``2``) → ``gres:gpu:h100:2``."""
    return "gres:gpu:" + spec


def _gres(spec: str) -> str:
    return ",".join("gres:" + item.strip() for item in spec.split(",") if item.strip())


_VALUE_OPTS = {
    "--gpus": "G", "-G": "G", "--gres": "g", "--nodes": "N", "-N": "N", "--gpus-per-node": "gpn",
    "--time": "t", "-t": "t", "--partition": "p", "-p": "p", "--comment": "comment", "--deadline": "deadline",
    "--cpus-per-gpu": "cpg", "--mem-per-gpu": "mpg", "--array": "a", "-a": "a", "--admin-comment": "admin",
    "--job-name": "J", "-J": "J", "--account": "A", "-A": "A", "--switches": "sw",
    "--ntasks": "n", "-n": "n", "--ntasks-per-node": "tpn", "--gpus-per-task": "gpt", "--gpus-per-socket": "gps",
    "--sockets-per-node": "spn", "--cpus-per-task": "c", "-c": "c", "--mincpus": "mincpus", "--mem": "mem",
    "--mem-per-cpu": "mpc", "--qos": "q", "-q": "q",
}
_FLAG_OPTS = {"--requeue": "requeue", "--no-requeue": "no-requeue", "--exclusive": "exclusive"}


def _count(value: str, what: str = "a count", least: int = 1) -> int:
    """A whole number of at least ``least``, as sbatch requires (``-n 0`` and ``-c 0`` it refuses)."""
    text = value.strip()
    if not text.isdigit() or int(text) < least:
        raise ValueError(f"expected {what} of {least} or more")
    return int(text)


def _gpu_spec(value: str) -> str:
    """``[type:]count``. sbatch passes any integer through (even ``-1``); the rules judge it."""
    gtype, _, count = value.rpartition(":")
    if not re.match(r"^-?\d+$", count.strip()) or (gtype and not re.match(r"^[A-Za-z0-9_.-]+$", gtype)):
        raise ValueError("expected [TYPE:]COUNT")
    return value


def parse_sbatch_args(
    args: Sequence[str], *, user_name: str = "", user_id: int = 0, now: float | None = None
) -> dict[str, Any]:
    """The job_desc fields for these sbatch arguments. Unknown options raise SbatchArgsError."""
    desc: dict[str, Any] = {
        "user_name": user_name, "user_id": user_id, "time_limit": NO_VAL, "min_nodes": NO_VAL,
        "max_nodes": NO_VAL, "requeue": NO_VAL16, "req_switch": NO_VAL, "wait4switch": NO_VAL,
        "has_script": True,
    }
    it = iter(args)
    for arg in it:
        if arg in _FLAG_OPTS:
            if _FLAG_OPTS[arg] == "exclusive":
                desc["shared"] = 0
            else:
                desc["requeue"] = 1 if _FLAG_OPTS[arg] == "requeue" else 0
            continue
        name, eq, value = arg.partition("=")
        if name not in _VALUE_OPTS and len(arg) > 2 and arg[:2] in _VALUE_OPTS and not arg.startswith("--"):
            name, value, eq = arg[:2], arg[2:], "="
        key = _VALUE_OPTS.get(name)
        if key is None:
            raise SbatchArgsError(f"unknown or unsupported sbatch option {arg!r}")
        if not eq:
            value = next(it, None)
            if value is None:
                raise SbatchArgsError(f"{name} needs a value")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]  # #SBATCH --opt="value": sbatch strips the quotes
        try:
            _apply(desc, key, value, now)
        except SbatchArgsError:
            raise
        except ValueError as e:
            raise SbatchArgsError(f"{name}={value!r}: {e}") from None
    _derive(desc)
    return desc


def _derive(desc: dict[str, Any]) -> None:
    """What sbatch itself works out before slurmctld sees the job (CPUs from tasks), and the
    combinations it refuses."""
    if desc.get("tres_per_socket") and "sockets_per_node" not in desc:
        raise SbatchArgsError("--gpus-per-socket needs --sockets-per-node (sbatch refuses it without)")
    cpt = desc.get("cpus_per_task")
    tasks = desc.get("num_tasks")
    if cpt is not None:
        desc["pn_min_cpus"] = max(desc.get("pn_min_cpus", 0), cpt)
    if cpt is not None or tasks is not None:
        desc["min_cpus"] = (cpt or 1) * (tasks or 1)
    if "min_mem_per_node" in desc and "min_mem_per_cpu" in desc:
        raise SbatchArgsError("--mem and --mem-per-cpu exclude each other")


def _apply(desc: dict[str, Any], key: str, value: str, now: float | None) -> None:
    if key == "G":
        desc["tres_per_job"] = _gpu_tres(_gpu_spec(value))
    elif key == "g":
        desc["tres_per_node"] = _gres(value)
    elif key == "gpn":
        desc["tres_per_node"] = _gpu_tres(_gpu_spec(value))
    elif key == "gpt":
        desc["tres_per_task"] = _gpu_tres(_gpu_spec(value))
    elif key == "gps":
        desc["tres_per_socket"] = _gpu_tres(_gpu_spec(value))
    elif key == "n":
        desc["num_tasks"] = _count(value)
    elif key == "tpn":
        desc["ntasks_per_node"] = _count(value)
    elif key == "spn":
        desc["sockets_per_node"] = _count(value)
    elif key == "c":
        desc["cpus_per_task"] = _count(value)
    elif key == "mincpus":
        desc["pn_min_cpus"] = _count(value)
    elif key == "mem":
        desc["min_mem_per_node"] = 0 if value.strip() == "0" else parse_mem_mb(value)
    elif key == "mpc":
        desc["min_mem_per_cpu"] = parse_mem_mb(value)
    elif key == "q":
        desc["qos"] = value
    elif key == "N":
        lo, _, hi = value.partition("-")
        desc["min_nodes"] = _count(lo, "a node count", 0)
        desc["max_nodes"] = _count(hi or lo, "a node count", 0)
        if desc["max_nodes"] < desc["min_nodes"]:
            raise ValueError("the node range's maximum is below its minimum")
    elif key == "t":
        minutes = parse_time_minutes(value)
        desc["time_limit"] = minutes if minutes else 0xFFFFFFFF  # sbatch: 0 means no limit
    elif key == "p":
        desc["partition"] = value
    elif key == "comment":
        desc["comment"] = value
    elif key == "admin":
        desc["admin_comment"] = value
    elif key == "deadline":
        desc["deadline"] = _deadline(value, now)
    elif key == "cpg":
        desc["cpus_per_tres"] = f"gres:gpu:{_count(value)}"
    elif key == "mpg":
        desc["mem_per_tres"] = f"gres:gpu:{parse_mem_mb(value)}"
    elif key == "a":
        desc["array_inx"] = value
    elif key == "J":
        desc["name"] = value
    elif key == "A":
        desc["account"] = value
    elif key == "sw":
        count, _, wait = value.partition("@")
        desc["req_switch"] = int(count)
        if wait:
            desc["wait4switch"] = parse_time_minutes(wait) * 60
