"""Energy per job: the counting rule (each agent sum counted once, at its largest), the store
(rows only raised, read per job, user and account) and the prioritizer that fills it from the
gpu-agents' files, across cycles and a restart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prioritizer import Prioritizer
from slurm_dl.core.energy import (
    NO_ENERGY,
    EnergySegment,
    EnergyTotal,
    energy_words,
    merge,
    segments_of,
    totals,
)
from slurm_dl.core.samples import JobGpuSample
from slurm_dl.slurm.gpu_alloc import GpuAllocation
from slurm_dl.store import Store
from slurm_dl.store.energy import energy_by, job_energy
from slurm_dl.telemetry import exposition
from slurm_dl.telemetry.agent import write_atomically
from slurm_dl.telemetry.attribution import attribute
from slurm_dl.telemetry.samples import GpuSample
from test_telemetry_prioritizer import scene

WATTS = 300.0
SINCE = 1000.0  # the agents' sums began when the jobs did (the scene's clock starts at 1000)


def sample(job: int, gpu: int, joules: float | None, since: float = SINCE) -> JobGpuSample:
    return JobGpuSample(
        job, "gpu01", gpu, 90.0, 1 << 30, WATTS, 1, 0.0, None, None, joules, joules, since
    )


def test_a_sum_counts_once_at_its_largest_and_a_new_sum_adds() -> None:
    seen = [sample(1, 0, 100.0), sample(1, 0, 250.0), sample(1, 0, 200.0), sample(0, 1, 9.0)]
    segs = segments_of(seen, {1: ("ann", "vision")})
    assert [(s.joules, s.user) for s in segs.values()] == [(250.0, "ann")]  # job 0: nobody's
    known: dict = {}
    assert [s.joules for s in merge(known, segs)] == [250.0]
    assert merge(known, segs) == [], "the same file read again counts nothing"
    assert merge(known, segments_of([sample(1, 0, 240.0)])) == [], "an older file lowers nothing"
    requeued = segments_of([sample(1, 0, 50.0, since=SINCE + 900)])  # a new sum after a requeue
    assert [s.joules for s in merge(known, requeued)] == [50.0]
    got = totals(known.values())[1]
    assert (got.joules, got.gpu_seconds) == (300.0, 300.0)
    assert known[(1, "gpu01", 0, SINCE)].user == "ann", "a later read without owners keeps them"


def test_energy_in_words() -> None:
    assert energy_words(None) == NO_ENERGY and energy_words(EnergyTotal()) == NO_ENERGY
    words = energy_words(EnergyTotal(joules=3.6e6 * 1.5, gpu_seconds=4 * 3600))
    assert words == "1.500 kWh over 4.0 GPU-hours (0.38 kWh per GPU-hour)"
    assert energy_words({"joules": 3.6e7 * 2, "gpu_seconds": 3600}).startswith(
        "20.0 kWh over 1.0 GPU-hours"
    )


def agent_writes(directory: Path, now: float) -> None:
    """gpu01's agent file: job 1 on GPUs 0-1 and job 2 on GPUs 2-3, each GPU drawing 300 W since
    the jobs began, as the agent's running sums say."""
    samples = [
        GpuSample("gpu01", i, i, 90.0, 1 << 30, 80 << 30, WATTS, (77,), now) for i in range(4)
    ]
    allocs = [GpuAllocation(1, "u", "gpu01", (0, 1)), GpuAllocation(2, "u", "gpu01", (2, 3))]
    held = now - SINCE
    rows = [
        replace(s, energy_joules=WATTS * held, energy_gpu_seconds=held, energy_since=SINCE)
        for s in attribute(samples, allocs)
    ]
    write_atomically(directory / "gpu01.prom", exposition.render(rows))


def run(p: Prioritizer, c, agents: Path, minutes: int) -> None:
    for _ in range(minutes):
        agent_writes(agents, c.now)
        p.run_cycle()
        c.now += 60


def test_the_prioritizer_keeps_each_jobs_energy_across_cycles_and_a_restart(tmp_path) -> None:
    config, c, store = scene(tmp_path, idle_action="report")
    agents = tmp_path / "agents"
    run(Prioritizer(config, c, store), c, agents, 5)  # files at 0..4 minutes
    first = job_energy(Store(store.url), 1)
    assert first is not None and first.joules == 2 * WATTS * 240 and first.gpu_seconds == 480
    # kill -9: a new daemon on the same store re-reads the agents' sums and adds only the growth
    run(Prioritizer(config, c, Store(store.url)), c, agents, 2)  # files at 5 and 6 minutes
    after = Store(store.url)
    assert job_energy(after, 1).joules == 2 * WATTS * 360, "nothing counted twice"
    assert job_energy(after, 3) is None
    per_user = energy_by(after, "user")
    assert set(per_user) == {c.jobs[1].user} and per_user[c.jobs[1].user].joules == 4 * WATTS * 360


def test_store_rows_are_only_raised(tmp_path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'e.db'}")
    seg = EnergySegment(7, "gpu01", 0, SINCE, 500.0, 10.0, SINCE + 10, "ann", "vision")
    from slurm_dl.store.energy import write_energy

    with store.engine.begin() as conn:
        assert write_energy(conn, [seg]) == 1
        assert write_energy(conn, [replace(seg, joules=400.0)]) == 0
        assert write_energy(conn, [replace(seg, joules=900.0, gpu_seconds=20.0)]) == 1
    assert (job_energy(store, 7).joules, energy_by(store, "account")["vision"].joules) == (
        900.0,
        900.0,
    )


def test_explain_and_status_say_the_jobs_kwh(tmp_path) -> None:
    from slurm_dl.explain.query import gather, payload, render_text

    config, c, store = scene(tmp_path, idle_action="report")
    run(Prioritizer(config, c, store), c, tmp_path / "agents", 3)
    doc = payload(gather(Store(store.url), 1), live=False)
    assert doc["energy"]["joules"] == 2 * WATTS * 120 and doc["energy"]["gpu_seconds"] == 240
    assert "energy: 0.020 kWh over 0.1 GPU-hours (0.30 kWh per GPU-hour)" in render_text(doc)
    del c.jobs[2]  # job 2 ended: its energy is still told
    run(Prioritizer(config, c, Store(store.url)), c, tmp_path / "agents", 1)
    gone = render_text(payload(gather(Store(store.url), 2), live=False))
    assert "no longer waiting or running" in gone and "energy: 0.020 kWh" in gone
