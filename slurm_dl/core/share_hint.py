"""Pure: repeated whole-GPU jobs that use a small part of their GPU are told a shard would do.

The prioritizer records each ended job's GPU use (:class:`RunUse`, kept as a ``gpu-use`` decision
row, so it ages out with the other decisions). When a user's last ``[sharing] suggest_after_runs``
runs of one job name each held one whole GPU and used at most ``suggest_max_fraction`` of it
(mean utilisation and peak memory), that user's running job of the same name is told so, in
``slurm-dl explain`` (and ``dlsubmit status JOBID``) and in a note in its comment.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Iterable

KIND = "gpu-use"
"""The decision kind a finished run's :class:`RunUse` is stored under."""

MIN_SAMPLES = 3
"""A run with fewer GPU samples says too little about its use."""


@dataclass(frozen=True)
class RunUse:
    """What one ended job did with its GPUs."""

    job_id: int
    user: str
    name: str
    gpus: int
    shared: bool  # ran on GPU shards, not whole GPUs
    peak_mem_bytes: int
    mean_util_percent: float
    samples: int
    ended_at: float

    def to_reason(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_reason(cls, text: str) -> "RunUse | None":
        """The record written by :meth:`to_reason`; None for anything else (never an error:
        the rows are the daemon's own, and a row of an older shape is simply not used)."""
        try:
            d = json.loads(text)
            return cls(
                int(d["job_id"]),
                str(d["user"]),
                str(d["name"]),
                int(d["gpus"]),
                bool(d["shared"]),
                int(d["peak_mem_bytes"]),
                float(d["mean_util_percent"]),
                int(d["samples"]),
                float(d["ended_at"]),
            )
        except (ValueError, TypeError, KeyError):
            return None


def small_run(run: RunUse, gpu_mem_bytes: int, max_fraction: float) -> bool:
    """One whole GPU, seen often enough, and at most ``max_fraction`` of its compute and memory used."""
    return (
        run.gpus == 1
        and not run.shared
        and run.samples >= MIN_SAMPLES
        and run.mean_util_percent <= 100.0 * max_fraction
        and run.peak_mem_bytes <= gpu_mem_bytes * max_fraction
    )


def share_hint(
    history: Iterable[RunUse],
    user: str,
    name: str,
    *,
    runs: int,
    gpu_mem_bytes: int,
    max_fraction: float,
) -> str | None:
    """The suggestion for a new job of ``user`` named ``name``: when the last ``runs`` ended runs
    of that user and name were all :func:`small_run`, a sentence for the user; else None."""
    if runs <= 0 or gpu_mem_bytes <= 0:
        return None
    mine = sorted(
        (r for r in history if r.user == user and r.name == name),
        key=lambda r: (r.ended_at, r.job_id),
    )
    last = mine[-runs:]
    if len(last) < runs or not all(small_run(r, gpu_mem_bytes, max_fraction) for r in last):
        return None
    util = max(r.mean_util_percent for r in last)
    mem = max(r.peak_mem_bytes for r in last) / 2**30
    return (
        f"its last {runs} runs used at most {util:.0f}% of their GPU and {mem:.1f} GiB: "
        "a GPU shard would do (dlsubmit --share)"
    )
