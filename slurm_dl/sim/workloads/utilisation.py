"""Per-job GPU utilisation for the simulator: the optional ``gpu_util`` trace value (pure).

A value is a constant (``35``: 35 % for the whole run) or a piecewise profile over the job's
run time, ``OFFSET:PERCENT`` steps separated by ``;`` (``0:85;3600:0``: 85 % from the start,
idle from one hour of run time on). Offsets are seconds of run time (executed time: a preempted
job's waits do not count), start at 0 and increase strictly; percentages are 0–100. The profile
applies to every GPU of the job. The trace has no process column, so a GPU at or below the idle
threshold is taken to hold no process (the idle policy's other condition).

Readers keep the validated text in ``job.tags[UTIL_TAG]``; :func:`profiles_of` parses it back.
"""

from __future__ import annotations

import math
import random
from typing import Sequence

from ...core.model import Job

UTIL_TAG = "gpu_util"
SYNTHETIC_BUSY_PERCENT = 90.0

Profile = tuple[
    tuple[float, float], ...
]  # ((offset_s, util_percent), ...), offsets from 0, increasing


def parse_profile(text: str) -> Profile:
    """``35`` or ``0:85;3600:0`` → ((0, 85), (3600, 0)); ValueError says what is wrong."""
    t = str(text).strip()
    if not t:
        raise ValueError("empty utilisation")
    if ":" not in t and ";" not in t:  # a constant
        try:
            util = float(t)
        except ValueError:
            raise ValueError(f"{text!r} is neither a percentage nor OFFSET:PERCENT steps") from None
        if not (math.isfinite(util) and 0.0 <= util <= 100.0):
            raise ValueError(f"{text!r}: utilisation is outside 0-100 %")
        return ((0.0, util),)
    steps: list[tuple[float, float]] = []
    for part in t.split(";"):
        part = part.strip()
        off_s, sep, util_s = part.partition(":")
        if not sep:
            raise ValueError(f"{text!r}: step {part!r} is not OFFSET_SECONDS:PERCENT")
        try:
            off, util = float(off_s), float(util_s)
        except ValueError:
            raise ValueError(f"{text!r}: step {part!r} is not OFFSET_SECONDS:PERCENT") from None
        if not (math.isfinite(util) and 0.0 <= util <= 100.0):
            raise ValueError(f"{text!r}: utilisation {util_s.strip()!r} is outside 0-100 %")
        if not math.isfinite(off) or off < 0:
            raise ValueError(f"{text!r}: offset {off_s.strip()!r} is not a time ≥ 0 s")
        if not steps and off != 0:
            raise ValueError(f"{text!r}: the profile must start at offset 0 (the job's start)")
        if steps and off <= steps[-1][0]:
            raise ValueError(f"{text!r}: offset {off_s.strip()!r} does not increase")
        steps.append((off, util))
    return tuple(steps)


def idle_segments(profile: Profile, duration: float, threshold: float) -> list[tuple[float, float]]:
    """Run-time intervals ``[start, end)`` within ``[0, duration)`` where utilisation ≤ ``threshold``."""
    out: list[tuple[float, float]] = []
    for i, (off, util) in enumerate(profile):
        if off >= duration:
            break
        end = min(profile[i + 1][0], duration) if i + 1 < len(profile) else duration
        if util > threshold or end <= off:
            continue
        if out and out[-1][1] == off:
            out[-1] = (out[-1][0], end)
        else:
            out.append((off, end))
    return out


def profiles_of(jobs: Sequence[Job]) -> list[Profile | None]:
    """The profile each job's trace row gave (``None``: no utilisation known), in job order."""
    return [parse_profile(j.tags[UTIL_TAG]) if UTIL_TAG in j.tags else None for j in jobs]


def parse_synthetic(text: str) -> tuple[float, int]:
    """``FRACTION[:SEED]`` (e.g. ``0.2`` or ``0.2:7``) → (fraction, seed); seed defaults to 0."""
    frac_s, _, seed_s = str(text).partition(":")
    try:
        frac = float(frac_s)
        seed = int(seed_s) if seed_s.strip() else 0
    except ValueError:
        raise ValueError(
            f"--synthetic-idle: got {text!r}; allowed: FRACTION[:SEED], e.g. 0.2 or 0.2:7"
        ) from None
    if not 0.0 <= frac <= 1.0:
        raise ValueError(f"--synthetic-idle: fraction {frac_s!r} is outside 0-1")
    return frac, seed


def synthetic_profiles(jobs: Sequence[Job], fraction: float, seed: int) -> list[Profile | None]:
    """SYNTHETIC utilisation for demos: each job, with probability ``fraction`` (deterministic by
    ``seed`` and job order), runs at 90 % and goes idle (0 %) for good after a uniformly random
    share of its run time; the others get no profile."""
    rng = random.Random(seed)
    out: list[Profile | None] = []
    for j in jobs:
        pick, share = rng.random(), rng.random()
        if pick < fraction:
            idle_from = share * float(j.duration or 0.0)
            out.append(
                ((0.0, SYNTHETIC_BUSY_PERCENT), (idle_from, 0.0))
                if idle_from > 0
                else ((0.0, 0.0),)
            )
        else:
            out.append(None)
    return out
