"""Each job's GPU energy, as the agent sums it from recorded NVML answers through its own file."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.slurm.gpu_alloc import GpuAllocation
from slurm_dl.telemetry.agent import sample_once
from slurm_dl.telemetry.attribution import ShareRule
from slurm_dl.telemetry.energy import MAX_POWER_GAP_S
from slurm_dl.telemetry.exposition import parse
from slurm_dl.telemetry.recorded import RecordedNvml

NODE = "gpu01"
T0 = 1_763_700_000.0
GIB = 1 << 30


def _rows(path: Path) -> dict[tuple[int, int], object]:
    return {(r.job_id, r.gpu): r for r in parse(path.read_text())}


def _sample(nvml, allocs, out: Path, now: float, **kw):
    return sample_once(nvml, NODE, lambda node: allocs, out, now=now, **kw)


def test_the_energy_counter_is_summed_per_job(tmp_path: Path) -> None:
    nvml = RecordedNvml([{"mem_total": 80 * GIB, "power_w": 300, "energy_mj": 5_000_000}])
    allocs = [GpuAllocation(7, "ann", NODE, (0,))]
    _sample(nvml, allocs, tmp_path, T0)
    first = _rows(tmp_path / f"{NODE}.prom")[(7, 0)]
    assert first.energy_joules == 0.0 and first.energy_since == T0  # a start, nothing counted
    assert first.counter_joules == 5000.0
    nvml.gpus[0]["energy_mj"] = 5_000_000 + 18_000_000  # 18 kJ in 60 s: 300 W
    _sample(nvml, allocs, tmp_path, T0 + 60)
    row = _rows(tmp_path / f"{NODE}.prom")[(7, 0)]
    assert row.energy_joules == pytest.approx(18_000.0)
    assert row.energy_gpu_seconds == pytest.approx(60.0)
    assert row.energy_since == T0


def test_without_a_counter_power_times_time_is_counted_but_not_across_a_long_gap(
    tmp_path: Path,
) -> None:
    nvml = RecordedNvml([{"mem_total": 80 * GIB, "power_w": 200}])  # NotSupported counter
    allocs = [GpuAllocation(7, "ann", NODE, (0,))]
    _sample(nvml, allocs, tmp_path, T0)
    nvml.gpus[0]["power_w"] = 300
    _sample(nvml, allocs, tmp_path, T0 + 30)
    row = _rows(tmp_path / f"{NODE}.prom")[(7, 0)]
    assert row.counter_joules is None
    assert row.energy_joules == pytest.approx(250.0 * 30)  # the mean of both ends
    _sample(nvml, allocs, tmp_path, T0 + 30 + MAX_POWER_GAP_S + 1)  # the agent was down
    later = _rows(tmp_path / f"{NODE}.prom")[(7, 0)]
    assert later.energy_joules == pytest.approx(250.0 * 30)
    assert later.energy_gpu_seconds == pytest.approx(30.0)


def test_a_counter_reset_counts_what_the_counter_read_since(tmp_path: Path) -> None:
    nvml = RecordedNvml([{"mem_total": 80 * GIB, "energy_mj": 9_000_000}])
    allocs = [GpuAllocation(7, "ann", NODE, (0,))]
    _sample(nvml, allocs, tmp_path, T0)
    nvml.gpus[0]["energy_mj"] = 1_500_000  # the driver reloaded: 1.5 kJ since then
    _sample(nvml, allocs, tmp_path, T0 + 60)
    assert _rows(tmp_path / f"{NODE}.prom")[(7, 0)].energy_joules == pytest.approx(1500.0)


def test_a_gpu_that_changed_hands_is_charged_to_nobody(tmp_path: Path) -> None:
    nvml = RecordedNvml([{"mem_total": 80 * GIB, "energy_mj": 0}])
    _sample(nvml, [GpuAllocation(7, "ann", NODE, (0,))], tmp_path, T0)
    nvml.gpus[0]["energy_mj"] = 6_000_000
    _sample(nvml, [GpuAllocation(8, "bob", NODE, (0,))], tmp_path, T0 + 60)
    row = _rows(tmp_path / f"{NODE}.prom")[(8, 0)]
    assert row.energy_joules == 0.0 and row.energy_since == T0 + 60


def test_shards_split_the_energy_by_share(tmp_path: Path) -> None:
    nvml = RecordedNvml([{"mem_total": 80 * GIB, "energy_mj": 0}])
    allocs = [
        GpuAllocation(7, "ann", NODE, (0,), 2),
        GpuAllocation(8, "bob", NODE, (0,), 4),
    ]
    kw = {"shares": {NODE: ShareRule(8)}, "jobs_of_pids": lambda pids: {}}
    _sample(nvml, allocs, tmp_path, T0, **kw)
    nvml.gpus[0]["energy_mj"] = 8_000_000
    _sample(nvml, allocs, tmp_path, T0 + 80, **kw)
    rows = _rows(tmp_path / f"{NODE}.prom")
    assert rows[(7, 0)].energy_joules == pytest.approx(2000.0)  # 2 of 8 shards
    assert rows[(8, 0)].energy_joules == pytest.approx(4000.0)  # 4 of 8; 2 held by nobody
    assert rows[(7, 0)].energy_gpu_seconds == pytest.approx(20.0)


def test_a_lost_gpu_is_left_out_and_no_gpus_sample_cleanly(tmp_path: Path) -> None:
    class Lost(RecordedNvml):
        def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
            if i == 1:
                raise RuntimeError("GPU is lost")
            return i

    nvml = Lost([{"mem_total": GIB, "energy_mj": 0}, {"mem_total": GIB}])
    assert _sample(nvml, [], tmp_path, T0).gpus == 1
    assert _sample(RecordedNvml([]), [], tmp_path / "none", T0).gpus == 0
