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

from .hints import parse_deadline
from .request import NO_VAL, NO_VAL16

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_MEM = re.compile(r"^(\d+)([KMGT]?)B?$", re.IGNORECASE)
_REL = re.compile(r"^now\+(\d+)(seconds?|minutes?|hours?|days?)?$")


class SbatchArgsError(ValueError):
    """An argument ``filter check`` cannot read: says which and why."""


def parse_time_minutes(text: str) -> int:
    """Slurm time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S → whole minutes (rounded up)."""
    t = text.strip().lower()
    if t in ("infinite", "unlimited"):
        return 0xFFFFFFFF
    m = _TIME.match(t)
    if not m:
        raise SbatchArgsError(f"--time={text!r}: expected M, M:S, H:M:S, D-H, D-H:M or D-H:M:S")
    days, a, b, c = m.groups()
    if days is not None:
        seconds = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:
        seconds = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:
        seconds = int(a) * 60 + int(b)
    else:
        seconds = int(a) * 60
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
}
_FLAG_OPTS = {"--requeue": "requeue", "--no-requeue": "no-requeue"}


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
    return desc


def _apply(desc: dict[str, Any], key: str, value: str, now: float | None) -> None:
    if key == "G":
        desc["tres_per_job"] = _gpu_tres(value)
    elif key == "g":
        desc["tres_per_node"] = _gres(value)
    elif key == "gpn":
        desc["tres_per_node"] = _gpu_tres(value)
    elif key == "N":
        lo, _, hi = value.partition("-")
        desc["min_nodes"] = int(lo)
        desc["max_nodes"] = int(hi or lo)
    elif key == "t":
        desc["time_limit"] = parse_time_minutes(value)
    elif key == "p":
        desc["partition"] = value
    elif key == "comment":
        desc["comment"] = value
    elif key == "admin":
        desc["admin_comment"] = value
    elif key == "deadline":
        desc["deadline"] = _deadline(value, now)
    elif key == "cpg":
        desc["cpus_per_tres"] = f"gres:gpu:{int(value)}"
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
