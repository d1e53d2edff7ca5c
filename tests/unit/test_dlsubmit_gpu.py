"""``dlsubmit status``'s GPU use, read from recorded gpu-agent files (tests/fixtures/telemetry):
utilisation, memory, idle time carried by the agent, slurm-dl's warning note; '–' without telemetry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_telemetry import (
    RECORDED,
    RecordedNvml,
)  # the agent tests' recorded NVML readings (same directory)

from slurm_dl.dlsubmit.gpu import gpu_cell
from slurm_dl.dlsubmit.status import describe_jobs, print_status
from slurm_dl.core.model import Job, JobState
from slurm_dl.slurm.gpu_alloc import GpuAllocation
from slurm_dl.telemetry import exposition
from slurm_dl.telemetry.agent import sample_once
from slurm_dl.telemetry.reader import read_exposition_dir

RECORDED_FILES = Path(__file__).resolve().parents[1] / "fixtures" / "telemetry"


def agent_files(tmp: Path) -> Path:
    """The recorded files as an agent leaves them (0644): a checkout made under umask 002 gives
    them group write, and the readers rightly ignore a file its group may write."""
    out = tmp / "agents"
    out.mkdir()
    for f in RECORDED_FILES.glob("*.prom"):
        (out / f.name).write_bytes(f.read_bytes())
        (out / f.name).chmod(0o644)
    return out


WARNED = "exp 4 [slurm-dl: GPUs idle 65 min (since 2025-11-21 03:35 UTC); unless they are used within 30 min, ...]"


@pytest.fixture
def jobs() -> list[Job]:
    return [
        Job(job_id=77, name="idle", state=JobState.RUNNING, nodes=("gpu01",), comment=WARNED),
        Job(job_id=78, name="busy", state=JobState.RUNNING, nodes=("gpu02",)),
        Job(job_id=79, name="waits", state=JobState.PENDING),
    ]


def test_running_jobs_show_utilisation_memory_idle_time_and_warning(
    jobs: list[Job], tmp_path: Path
) -> None:
    samples = read_exposition_dir(agent_files(tmp_path))
    rows = {
        j.job_id: describe_jobs(jobs, j.job_id, None, samples)[0] for j in jobs
    }  # by id: no submit records
    idle, busy, waits = rows[77], rows[78], rows[79]
    assert idle["gpu"] == {
        "gpus": 2,
        "share_bytes": None,
        "over_share": False,
        "mean_util_percent": 0.5,
        "mem_used_bytes": 4 << 30,
        "processes": 0,
        "idle_minutes": 60.0,
        "sampled_at": 1_763_700_000.0,
        "note": WARNED.split("[slurm-dl: ")[1][:-1],
    }
    assert gpu_cell(idle) == "0.5% of 2 GPU(s), 4.0 GiB, idle 60 min, warned"
    assert busy["gpu"]["idle_minutes"] is None and busy["gpu"]["note"] is None
    assert gpu_cell(busy) == "90% of 2 GPU(s), 61.0 GiB"
    assert waits["gpu"] is None and gpu_cell(waits) == "-"
    json.dumps(list(rows.values()))  # the --json output stays serialisable


def test_without_telemetry_the_column_says_so(jobs: list[Job]) -> None:
    [row] = describe_jobs(jobs, 77, None, None)
    assert row["telemetry"] is False and row["gpu"] is None and gpu_cell(row) == "–"
    [row] = describe_jobs(jobs, 78, None, [])  # configured, but no agent file names the job
    assert gpu_cell(row) == "no samples"


def test_action_notes_show_in_the_cell(jobs: list[Job], tmp_path: Path) -> None:
    jobs[0].comment = "[slurm-dl: deprioritized: GPUs idle 95 min (since ?); first to be requeued]"
    [row] = describe_jobs(jobs, 77, None, read_exposition_dir(agent_files(tmp_path)))
    assert gpu_cell(row).endswith("idle 60 min, deprioritized")


def test_status_table_has_the_gpu_column(
    jobs: list[Job], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # a wide terminal: rich folds cells on a narrow one
    samples = read_exposition_dir(agent_files(tmp_path))
    rows = [describe_jobs(jobs, j.job_id, None, samples)[0] for j in jobs]
    print_status(rows)
    out = capsys.readouterr().out
    assert "GPU use" in out and "idle 60 min" in out and "warned" in out


def test_agent_carries_idle_since_from_its_previous_file(tmp_path: Path) -> None:
    def allocs(node: str) -> list[GpuAllocation]:
        return [GpuAllocation(11, "ann", node, (0, 1)), GpuAllocation(12, "bo", node, (7,))]

    sample_once(RecordedNvml(RECORDED), "gpu01", allocs, tmp_path, now=10.0)
    second = sample_once(RecordedNvml(RECORDED), "gpu01", allocs, tmp_path, now=40.0)
    by_gpu = {s.gpu: s for s in second.samples}
    assert by_gpu[7].idle_since == 10.0, (
        "GPU 7 (idle, no process) has been idle since the first sample"
    )
    assert by_gpu[0].idle_since is None and by_gpu[2].idle_since is None, (
        "busy, or a context held: not idle"
    )
    back = {s.gpu: s for s in exposition.parse((tmp_path / "gpu01.prom").read_text())}
    assert back[7].idle_since == 10.0 and back[0].idle_since is None
    busy = [dict(g, util=50) if g["minor"] == 7 else g for g in RECORDED]
    third = sample_once(RecordedNvml(busy), "gpu01", allocs, tmp_path, now=70.0)
    assert {s.gpu: s for s in third.samples}[7].idle_since is None
    fourth = sample_once(RecordedNvml(RECORDED), "gpu01", allocs, tmp_path, now=100.0)
    assert {s.gpu: s for s in fourth.samples}[7].idle_since == 100.0, (
        "a new idle spell starts afresh"
    )
    other = sample_once(
        RecordedNvml(RECORDED),
        "gpu01",
        lambda n: [GpuAllocation(13, "cy", n, (7,))],
        tmp_path,
        now=130.0,
    )
    assert {s.gpu: s for s in other.samples}[7].idle_since == 130.0, (
        "another job's spell is not inherited"
    )
