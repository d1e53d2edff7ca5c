"""Slurm's own spellings of time limits and memory sizes, read and checked. Pure.

Time, as ``sbatch --time`` takes it: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
``D-HH:MM:SS``. Memory, as ``--mem-per-gpu`` takes it: a number with a unit ``K``, ``M``,
``G`` or ``T`` (sbatch reads a bare number as megabytes, which is rarely what was meant, so
dlsubmit asks for the unit).
"""

from __future__ import annotations

import re

from .errors import SlurmDLError

TIME_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_MEM = re.compile(r"^(\d+)([KMGT])B?$", re.IGNORECASE)
_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


class UnitError(SlurmDLError, ValueError):
    """A time or memory value in a form Slurm would not read (or would read differently)."""


def time_seconds(text: str) -> int | None:
    """Seconds of a Slurm time (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S), or None if it is not one."""
    m = _TIME.match(text.strip())
    if not m:
        return None
    days, a, b, c = m.groups()
    if days is not None:
        return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:
        return int(a) * 60 + int(b)
    return int(a) * 60


def parse_time_seconds(text: str, option: str = "--time") -> int:
    """A Slurm time limit in seconds; 0, negative and malformed values are errors."""
    t = str(text).strip()
    seconds = time_seconds(t)
    if seconds is None:
        raise UnitError(
            f"{option} {text!r}: expected {TIME_FORMATS} (e.g. 90, 2:00:00, 1-00:00:00)"
        )
    if seconds <= 0:
        raise UnitError(f"{option} {t}: must be more than zero (to Slurm, 0 means no limit)")
    return seconds


def format_time(seconds: int) -> str:
    """Seconds as Slurm prints a time limit: ``MM:SS``, ``HH:MM:SS`` or ``D-HH:MM:SS``."""
    seconds = int(seconds)
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h}:{m:02d}:{s:02d}"
    return f"{m}:{s:02d}"


def parse_memory_mb(text: str, option: str = "--mem-per-gpu") -> tuple[int, str]:
    """(megabytes, the value as sbatch should see it) for ``80G``, ``512M``, ``1T``…"""
    t = str(text).strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", t):
        if t.startswith("-") or float(t) == 0:
            raise UnitError(f"{option} {t}: must be more than zero, with a unit (e.g. 80G)")
        raise UnitError(f"{option} {t}: give a unit, e.g. {t}G or {t}M (Slurm reads {t} as MB)")
    m = _MEM.match(t)
    if not m:
        raise UnitError(
            f"{option} {text!r}: expected a whole number with a unit K, M, G or T (e.g. 80G, 512M)"
        )
    number, unit = int(m.group(1)), m.group(2).upper()
    if number <= 0:
        raise UnitError(f"{option} {text!r}: must be more than zero")
    return max(1, int(number * _MB[unit])), f"{number}{unit}"
