"""Pure: each job's GPU energy, carried sample to sample in the agent's own file.

Per GPU, the energy of the interval since the agent's previous sample is NVML's energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded) now minus then.
A counter lower than before was reset (the driver reloaded): everything it counts was used
since then, inside the interval, so the interval gets the new reading (what the GPU used
between the previous sample and the reload is not known and not counted). A GPU without the
counter (NVML answers NotSupported: older GPUs, some vGPUs) is measured by its power draw
(``nvmlDeviceGetPowerUsage``) times the interval, the mean of the two ends where both are
known, and only over a gap of at most :data:`MAX_POWER_GAP_S`: across a longer one (the agent
was down) power times time would be a guess, so nothing is counted.

The interval goes to the job that held the GPU at both ends; one in which the GPU changed
hands (a job started or ended in between) is charged to nobody, as no sample says when. On a
GPU shared through shards each holder gets its ``gpu_share`` of the joules and of the
GPU-seconds (so kWh per GPU-hour stays the GPU's). Each row carries the job's running sum on
that GPU since ``energy_since``: a reader that missed files loses nothing, and one that sees a
new ``energy_since`` (the job came back after a requeue, the agent's file was lost) knows a new
sum began.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from .samples import GpuSample, JobGpuSample

MAX_POWER_GAP_S = 300.0
"""Power × time is counted across at most this many seconds between two samples."""

MAX_PLAUSIBLE_WATTS = 100_000.0
"""A counter step above this many watts over its interval is no reading (another GPU, a glitch)."""


def interval_energy(
    gpu: GpuSample, before: list[JobGpuSample], holders: set[int]
) -> tuple[float, float] | None:
    """(joules, seconds) ``gpu`` used since the agent's previous sample of it (``before``: its
    rows in the previous file); None when the interval is not counted (no previous sample, a
    clock that went back, the GPU changed hands, no counter and no power, a long power gap)."""
    if not before:
        return None
    prev = before[0]
    dt = gpu.time - prev.time
    if dt <= 0 or {r.job_id for r in before} != holders:
        return None
    if gpu.energy_mj is not None and prev.counter_joules is not None:
        now = gpu.energy_mj / 1000.0
        joules = now - prev.counter_joules if now >= prev.counter_joules else now
        return (joules, dt) if joules <= MAX_PLAUSIBLE_WATTS * dt else None
    if gpu.power_watts is None or dt > MAX_POWER_GAP_S:
        return None
    then = next((r.power_watts for r in before if r.power_watts is not None), None)
    watts = gpu.power_watts if then is None else (gpu.power_watts + then) / 2.0
    return watts * dt, dt


def carry_energy(
    samples: Iterable[JobGpuSample], gpus: Iterable[GpuSample], previous: Iterable[JobGpuSample]
) -> list[JobGpuSample]:
    """``samples`` (attributed rows of ``gpus``) with their energy fields, carried on from
    ``previous`` (the agent's last file)."""
    rows = list(samples)
    raw = {(g.node, g.slurm_index): g for g in gpus}
    before: dict[tuple[str, int], list[JobGpuSample]] = {}
    for p in previous:
        before.setdefault((p.node, p.gpu), []).append(p)
    holders: dict[tuple[str, int], set[int]] = {}
    for s in rows:
        holders.setdefault((s.node, s.gpu), set()).add(s.job_id)
    spent: dict[tuple[str, int], tuple[float, float] | None] = {
        key: interval_energy(g, before.get(key, []), holders.get(key, set()))
        for key, g in raw.items()
    }
    out = []
    for s in rows:
        key = (s.node, s.gpu)
        g = raw.get(key)
        mine = next(
            (p for p in before.get(key, []) if p.job_id == s.job_id and p.energy_since is not None),
            None,
        )
        if mine is not None and mine.time < s.time:
            since, joules, secs = (
                mine.energy_since,
                mine.energy_joules or 0.0,
                mine.energy_gpu_seconds or 0.0,
            )
        else:
            since, joules, secs = s.time, 0.0, 0.0
        step = spent.get(key)
        if step is not None:
            share = 1.0 if s.gpu_share is None else s.gpu_share
            joules += step[0] * share
            secs += step[1] * share
        out.append(
            replace(
                s,
                energy_joules=round(joules, 3),
                energy_gpu_seconds=round(secs, 3),
                energy_since=since,
                counter_joules=(
                    g.energy_mj / 1000.0 if g is not None and g.energy_mj is not None else None
                ),
            )
        )
    return out
