"""When a waiting job starts, said once, and where it resumes: ``slurm-dl explain``'s start line
and its restart line. Pure.

Two numbers speak of a waiting job's start: Slurm's own (``squeue --start``) and when its GPUs
free up on one node if the running jobs use their whole time limit (:func:`earliest_fit`).
Slurm's is the later of when the job may start and when its backfill plan has room for it;
before its plan reaches the job, right after a requeue (a requeued job may not start again for
a while), Slurm's time says only when it may start, and can lie minutes before its GPUs are
free. :func:`start_estimate` makes the two one: Slurm's time unless the GPUs cannot be free by
then, else when they free up, and says why it is not Slurm's.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping

AGREE_S = 60.0
"""Slurm's time and the GPUs' time within this many seconds are the same time."""


def clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def duration(seconds: float) -> str:
    s = abs(float(seconds))
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def earliest_fit(
    gpus: int,
    releases: Iterable[tuple[int, Iterable[tuple[float, int]]]] | None,
    now: float | None,
    nodes: int = 1,
) -> float | None:
    """When ``nodes`` nodes (one by default) first each have their share of ``gpus`` free,
    from each node's free GPUs now and the (end time, GPUs) of its running jobs at their time
    limits; None if never that many."""
    if not releases or gpus <= 0 or now is None:
        return None
    nodes = max(1, int(nodes or 1))
    per_node = -(-gpus // nodes)
    times = []
    for free, ends in releases:
        have, at = free, now
        for end, n in sorted(ends):
            if have >= per_node:
                break
            have, at = have + n, max(now, end)
        if have >= per_node:
            times.append(at)
    return sorted(times)[nodes - 1] if len(times) >= nodes else None


def where(nodes: int | None) -> str:
    """``one node`` or ``3 nodes``: where a job's GPUs free up."""
    n = max(1, int(nodes or 1))
    return "one node" if n == 1 else f"{n} nodes"


NO_ESTIMATE = (
    "none: Slurm has not estimated it yet (its backfill pass does, for jobs near the front)"
)


def start_estimate(
    estimate: Mapping[str, Any] | None,
    now: float | None,
    fit: float | None = None,
    gpus: int | None = None,
    nodes: int | None = None,
) -> dict[str, Any]:
    """The one start time a waiting job is told: ``at``, ``in_s``, ``source`` (``slurm``, or
    ``time limits`` when its GPUs cannot be free by Slurm's time), ``slurm_at`` (Slurm's own
    time) and ``words``. ``fit``: when ``gpus`` free up on one node (:func:`earliest_fit`;
    None where that does not bound the start: a preemption frees them sooner)."""
    if not estimate or not estimate.get("at"):
        return {"at": None, "source": None, "words": NO_ESTIMATE}
    slurm_at = float(estimate["at"])
    if fit is not None and now is not None and fit - max(now, slurm_at) > AGREE_S:
        return {
            "at": fit,
            "in_s": fit - now,
            "source": "time limits",
            "slurm_at": slurm_at,
            "words": f"{clock(fit)} (in {duration(fit - now)}), when {gpus} GPUs free up on "
            f"{where(nodes)} if the running jobs use their whole time limit; Slurm's own time "
            f"({clock(slurm_at)[11:]}) is only when it may start the job (a requeued job "
            "waits a while first), its GPUs are in use until then",
        }
    in_s = None if now is None else slurm_at - now
    words = clock(slurm_at) + ("" if in_s is None else f" (in {duration(max(0.0, in_s))})")
    words += (
        "; Slurm's estimate from running jobs' time limits: sooner if they end early, later if "
        "higher-priority jobs arrive"
    )
    return {
        "at": slurm_at,
        "in_s": in_s,
        "source": estimate.get("source", "slurm"),
        "slurm_at": slurm_at,
        "words": words,
    }


def start_for_people(est: Mapping[str, Any]) -> str:
    """The ``start:`` line of the plain explanation, from :func:`start_estimate`'s entry."""
    if not est.get("at"):
        return "Slurm has not estimated it yet (it does so for jobs near the front)"
    at, in_s = est["at"], est.get("in_s")
    when = clock(at)[11:] if in_s is not None and in_s < 20 * 3600 else clock(at)
    soon = "" if in_s is None else f" (in {duration(max(0.0, in_s))})"
    if est.get("source") == "time limits":
        return (
            f"{when}{soon}, when its GPUs free up if the running jobs use their whole "
            f"time limit; Slurm may start it from {clock(est['slurm_at'])[11:]}, but its "
            "GPUs are in use until then"
        )
    return (
        f"Slurm expects {when}{soon}, going by the running jobs' time limits: sooner if "
        "they end early, later if higher-priority jobs arrive"
    )


def restart_words(
    restarts: int | None, max_restarts: int | None, resumes_from: str | None, waiting: bool
) -> str | None:
    """``restart 1 of 5, resumes from step-000031.json``: the job's restarts against the cap on
    preemptions (``[preemption] max_restarts``, None: not known) and, waiting, the checkpoint
    its next start resumes from (``resumes_from``: the file's name; "" none yet; None not
    known here). None for a job never restarted."""
    n = int(restarts or 0)
    if n <= 0:
        return None
    text = f"restart {n}" + (f" of {max_restarts}" if max_restarts is not None else "")
    if max_restarts is not None and n >= max_restarts:
        text += " (not preempted again)"
    if waiting and resumes_from:
        text += f", resumes from {resumes_from}"
    elif waiting and resumes_from == "":
        text += ", starts from the beginning (no checkpoint yet)"
    return text


def step_outlook(expl: Mapping[str, Any], start_at: float | None) -> str | None:
    """For a soft-deadline job waiting with a promised step: whether starting at ``start_at``
    (the one start :func:`start_estimate` tells) its time limit ends by that step, the latest
    start that does, and what happens if it misses it. None without a promised step or a
    start time."""
    steps, promised = expl.get("deadline_steps"), expl.get("deadline_step_promised")
    limit = expl.get("time_limit")
    if not steps or promised is None or start_at is None or not limit:
        return None
    done = float(expl.get("executed_s") or 0.0) if expl.get("checkpointable") else 0.0
    need = max(0.0, float(limit) - done)
    end, latest = start_at + need, float(promised) - need
    hm = clock(promised)[11:]
    if end <= float(promised):
        return (
            f"promised step {hm}: met if it starts by {clock(latest)[11:]}; starting at "
            f"{clock(start_at)[11:]} its time limit ({duration(need)}) ends at {clock(end)[11:]}"
        )
    top = max(float(v) for _, v in steps) or 1.0
    later = next(((t, v) for t, v in steps if t > float(promised) and t >= end and v > 0), None)
    then = (
        f"it then aims at the step {clock(later[0])[11:]} (worth {round(100 * later[1] / top)} %),"
        " with GPUs nobody else wants"
        if later
        else "no later step can be reached either"
    )
    return (
        f"promised step {hm}: needs it to start by {clock(latest)[11:]} (its time limit, "
        f"{duration(need)}, before the step), but the start expected is {clock(start_at)[11:]}. "
        f"It is boosted as the step nears and may start sooner; if it starts after "
        f"{clock(latest)[11:]} it misses the step: {then}"
    )
