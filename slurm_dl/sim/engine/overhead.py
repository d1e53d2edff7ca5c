"""The scheduler's dispatch overhead, read off an imported history (pure).

A replay starts a job the moment enough GPUs are free; a live scheduler starts it a little
later: the job that held them must complete (epilog, the node reporting back) and the next
scheduling pass must come. Over a deep queue these gaps add up: each job starts later than
the replay says by the sum of the gaps before it.

:func:`dispatch_gaps` measures them in the recorded history itself: for each job that had
to wait for GPUs, the time from the moment the recorded schedule had its GPUs free (the
last job end after which enough GPUs stayed free, cluster-wide) to its recorded start. On
GPUs of several types, where each job's type is recorded, each type's GPUs count for its own
jobs: a job that waited for an H100 while V100s were free waited for the H100s.
:func:`estimate_dispatch` turns their median into a :class:`~slurm_dl.sim.engine.state.Dispatch`
for the replay: with scheduling passes every ``pass_s`` seconds a start waits on average
half a period for its pass, the rest is the release delay. Accounting keeps whole seconds, so
a gap of 1 s is anything from 0.5 to 1.5 s: the median of whole-second gaps is interpolated
within its second (the grouped median), not rounded to it.
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from ...core.model import Job
from .state import Dispatch


@dataclass(frozen=True)
class DispatchEstimate:
    dispatch: Dispatch
    gaps: int  # jobs measured (those that waited for GPUs)
    median_gap_s: float | None
    p90_gap_s: float | None

    def describe(self) -> str:
        if self.median_gap_s is None:
            return "dispatch overhead: not measurable (no job waited for GPUs)"
        return (
            f"dispatch overhead from the history: GPUs free to the next start a median "
            f"{self.median_gap_s:g} s (p90 {self.p90_gap_s:g} s, {self.gaps} starts); "
            f"replayed with {self.dispatch.describe()}"
        )


def _recorded(job: Job) -> tuple[float, float] | None:
    s = job.tags.get("recorded_start") if job.tags else None
    if s is None or job.duration is None:
        return None
    start = float(s)
    return start, start + float(job.duration)


def dispatch_gaps(
    jobs: Sequence[Job], total_gpus: int, type_gpus: dict[str, int] | None = None
) -> list[float]:
    """Per job that waited for GPUs: recorded start minus the time enough GPUs were free.
    ``type_gpus`` (the GPUs of each type): when every job's type is recorded and is one of
    them, each type's jobs are measured on that type's GPUs alone."""
    if type_gpus and all(j.gpu_type in type_gpus for j in jobs if j.num_gpus > 0):
        return [
            g
            for t, n in type_gpus.items()
            for g in dispatch_gaps([j for j in jobs if j.gpu_type == t], n)
        ]
    runs = [(j, r) for j in jobs if (r := _recorded(j)) is not None and j.num_gpus > 0]
    # GPUs in use after each event time (starts and ends of the recorded schedule)
    deltas: dict[float, int] = {}
    for j, (s, e) in runs:
        deltas[s] = deltas.get(s, 0) + j.num_gpus
        deltas[e] = deltas.get(e, 0) - j.num_gpus
    times = sorted(deltas)
    busy_after: list[int] = []
    b = 0
    for t in times:
        b += deltas[t]
        busy_after.append(b)
    gaps = []
    for j, (s, _) in runs:
        need = j.num_gpus
        # walk back from the event just before the start (the job itself not counted: its own
        # start is at s, so the state just before s excludes it)
        i = bisect.bisect_left(times, s) - 1
        if i < 0:
            continue
        free_from = None
        while i >= 0:
            if total_gpus - busy_after[i] < need:
                # not enough free after times[i]: they came free at the next event time
                free_from = times[i + 1] if i + 1 < len(times) else None
                break
            i -= 1
        if free_from is None or free_from > s or free_from <= j.submit_time:
            continue  # free since before its submission (or never short): no wait for GPUs
        gaps.append(s - free_from)
    return gaps


def median_gap(gaps: Sequence[float]) -> float:
    """The median; of whole seconds, the grouped median (second k spans k - 0.5 to k + 0.5)."""
    if not gaps:
        raise ValueError("no gaps")
    if any(g != int(g) for g in gaps):
        return float(statistics.median(gaps))
    counts = Counter(int(g) for g in gaps)
    half = len(gaps) / 2.0
    below = 0
    for k in sorted(counts):
        if below + counts[k] >= half:
            return k - 0.5 + (half - below) / counts[k]
        below += counts[k]
    raise AssertionError("unreachable")


def estimate_dispatch(
    jobs: Sequence[Job],
    total_gpus: int,
    pass_s: float = 0.0,
    type_gpus: dict[str, int] | None = None,
) -> DispatchEstimate:
    """The median gap between GPUs coming free and the next start, as a replay's release
    delay; with ``pass_s``, half a pass period of it is left to the passes. ``type_gpus``:
    the GPUs of each type, on a cluster of several (see :func:`dispatch_gaps`)."""
    gaps = dispatch_gaps(jobs, total_gpus, type_gpus)
    if not gaps:
        return DispatchEstimate(Dispatch(0.0, pass_s), 0, None, None)
    med = median_gap(gaps)
    p90 = sorted(gaps)[int(0.9 * (len(gaps) - 1))]
    release = max(0.0, med - pass_s / 2.0)
    return DispatchEstimate(
        Dispatch(round(release, 2), pass_s), len(gaps), round(med, 2), round(p90, 2)
    )
