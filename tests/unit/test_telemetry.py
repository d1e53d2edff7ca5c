"""GPU agent: NVML sampling over recorded readings, Slurm GPU index parsing, attribution, exposition."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.slurm.gpu_alloc import GpuAllocation, gpu_allocations, parse_idx
from slurm_dl.telemetry import exposition, nvml as nvml_mod
from slurm_dl.telemetry.agent import sample_once
from slurm_dl.telemetry.attribution import attribute, summarize
from slurm_dl.telemetry.nvml import NvmlUnavailableError, load_nvml, sample_gpus
from slurm_dl.telemetry.samples import GpuSample, JobGpuSample, ProcessSample

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


class NotSupported(Exception):
    pass


class RecordedNvml:
    """Replays recorded NVML readings through the pynvml function names the sampler calls."""

    def __init__(self, gpus: list[dict]):
        self.gpus = gpus
        self.calls = 0

    def _get(self, handle: int, key: str):
        self.calls += 1
        value = self.gpus[handle].get(key)
        if value is None:
            raise NotSupported(key)
        return value

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=self._get(h, "util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, h):
        used, total = self._get(h, "mem")
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._get(h, "power_mw")

    def nvmlDeviceGetMinorNumber(self, h):
        return self._get(h, "minor")

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p, usedGpuMemory=1) for p in self._get(h, "compute")]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return [SimpleNamespace(pid=p, usedGpuMemory=1) for p in self._get(h, "graphics")]


# Recorded on a 4-GPU node: GPU 0/1 busy under one job, GPU 2 holds a context but computes
# nothing, GPU 3 (minor 7: devices enumerate out of order) reports no power reading.
RECORDED = [
    {
        "util": 97,
        "mem": (40 << 30, 80 << 30),
        "power_mw": 612_000,
        "minor": 0,
        "compute": [4242],
        "graphics": [],
    },
    {
        "util": 95,
        "mem": (39 << 30, 80 << 30),
        "power_mw": 598_500,
        "minor": 1,
        "compute": [4242],
        "graphics": [],
    },
    {
        "util": 0,
        "mem": (1 << 30, 80 << 30),
        "power_mw": 71_000,
        "minor": 2,
        "compute": [5150],
        "graphics": [5151],
    },
    {"util": 0, "mem": (0, 80 << 30), "power_mw": None, "minor": 7, "compute": [], "graphics": []},
]


def test_sampler_reads_every_field_of_every_gpu() -> None:
    samples = sample_gpus(RecordedNvml(RECORDED), "gpu01", now=1000.0)
    assert [s.index for s in samples] == [0, 1, 2, 3]
    assert samples[0] == GpuSample(
        "gpu01",
        0,
        0,
        97.0,
        40 << 30,
        80 << 30,
        612.0,
        (4242,),
        1000.0,
        (ProcessSample(4242, 1, None),),
    )
    assert samples[2].pids == (5150, 5151)  # compute and graphics contexts both count
    assert samples[3].power_watts is None and samples[3].slurm_index == 7


def test_sampler_survives_unsupported_fields() -> None:
    gpu = {
        "util": None,
        "mem": None,
        "power_mw": None,
        "minor": None,
        "compute": None,
        "graphics": None,
    }
    [s] = sample_gpus(RecordedNvml([gpu]), "n", now=1.0)
    assert (s.util_percent, s.mem_used_bytes, s.power_watts, s.minor, s.pids, s.slurm_index) == (
        0.0,
        0,
        None,
        None,
        (),
        0,
    )


@pytest.mark.parametrize(
    "entry, want",
    [
        ("gpu:h100:3(IDX:0-2)", (0, 1, 2)),
        ("gpu:h100:2(IDX:0,3)", (0, 3)),
        ("gpu:2(IDX:4-5),nic:1", (4, 5)),
        ("gpu:a100:4(IDX:0,2-3,6)", (0, 2, 3, 6)),
        ("gpu:h100:0(IDX:N/A)", ()),
        ("", ()),
    ],
)
def test_parse_idx(entry: str, want: tuple[int, ...]) -> None:
    assert parse_idx(entry) == want


def test_allocations_from_recorded_squeue_json() -> None:
    doc = json.loads((FIXTURES / "squeue.json").read_text())
    allocs = gpu_allocations(doc)
    assert allocs, "the fixture has running GPU jobs"
    running = {
        j["job_id"]: j for j in doc["jobs"] if j["job_state"] == "RUNNING" and j["gres_detail"]
    }
    assert {a.job_id for a in allocs} == set(running)
    # a two-node job gets one allocation per node, each with the node's own indices
    nodes_of = {}
    for a in allocs:
        nodes_of.setdefault(a.job_id, []).append(a.node)
        assert a.gpus == tuple(range(8))
    assert sorted(len(v) for v in nodes_of.values()) == [2] * len(running)
    only = gpu_allocations(doc, node=allocs[0].node)
    assert {a.node for a in only} == {allocs[0].node}


def test_allocations_pair_nodes_with_their_own_gres_entry() -> None:
    doc = {
        "jobs": [
            {
                "job_id": 7,
                "job_state": "RUNNING",
                "user_name": "ann",
                "nodes": "gpu[01-02]",
                "gres_detail": ["gpu:h100:2(IDX:0-1)", "gpu:h100:1(IDX:5)"],
            },
            {"job_id": 8, "job_state": "PENDING", "nodes": "", "gres_detail": []},
            {
                "job_id": 9,
                "job_state": "RUNNING",
                "user_name": "bob",
                "nodes": "cpu01",
                "gres_detail": ["(null)"],
            },
        ]
    }
    assert gpu_allocations(doc) == [
        GpuAllocation(7, "ann", "gpu01", (0, 1)),
        GpuAllocation(7, "ann", "gpu02", (5,)),
    ]


def test_attribution_uses_slurm_index_and_marks_unallocated_gpus() -> None:
    samples = sample_gpus(RecordedNvml(RECORDED), "gpu01", now=50.0)
    allocs = [
        GpuAllocation(11, "ann", "gpu01", (0, 1)),
        GpuAllocation(12, "bob", "gpu01", (2, 7)),
        GpuAllocation(13, "cy", "gpu02", (3,)),
    ]
    got = attribute(samples, allocs)
    assert [(s.gpu, s.job_id) for s in got] == [(0, 11), (1, 11), (2, 12), (7, 12)]
    assert attribute(samples, [])[0].job_id == 0
    per_job = summarize(got)
    assert (
        per_job[11].gpus == 2
        and per_job[11].mean_util_percent == 96.0
        and per_job[11].processes == 2
    )
    assert (
        per_job[12].max_util_percent == 0.0
        and per_job[12].processes == 2
        and per_job[12].power_watts == 71.0
    )
    assert summarize(attribute(samples, [])) == {}


def test_exposition_round_trip() -> None:
    rows = [
        JobGpuSample(11, "gpu01", 0, 97.0, 40 << 30, 612.0, 1, 1000.25),
        JobGpuSample(0, "gpu01", 7, 0.0, 0, None, 0, 1000.25),
    ]
    text = exposition.render(rows)
    assert "# TYPE slurm_dl_gpu_utilization_percent gauge" in text
    assert 'slurm_dl_gpu_utilization_percent{job="11",node="gpu01",gpu="0"} 97 1000250' in text
    assert exposition.parse(text) == rows


def test_sample_once_writes_the_node_file(tmp_path: Path) -> None:
    asked = []

    def allocations(node: str):
        asked.append(node)
        return [GpuAllocation(11, "ann", node, (0, 1))]

    result = sample_once(RecordedNvml(RECORDED), "gpu01", allocations, tmp_path, now=10.0)
    assert asked == ["gpu01"] and result.gpus == 4 and result.written == tmp_path / "gpu01.prom"
    back = exposition.parse(result.written.read_text())
    assert [(s.job_id, s.gpu) for s in back] == [(11, 0), (11, 1), (0, 2), (0, 7)]
    assert set(result.jobs) == {11}
    assert not list(tmp_path.glob(".*")), "no temporary file left behind"


def test_load_nvml_without_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlUnavailableError, match="pynvml"):
        load_nvml()


def test_gpu_agent_once_without_nvml_says_so_and_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    res = CliRunner().invoke(app, ["gpu-agent", "--once"])
    assert res.exit_code == 0, res.output
    assert "no NVML" in res.output and len(res.output.strip().splitlines()) == 1


def test_gpu_agent_once_without_gpus_says_so_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(nvml_mod, "load_nvml", lambda: RecordedNvml([]))
    res = CliRunner().invoke(
        app, ["gpu-agent", "--once", "--node", "cpu01", "--output-dir", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    assert "cpu01: no GPUs" in res.output and not list(tmp_path.iterdir())


def test_gpu_agent_daemon_keeps_running_while_slurm_cannot_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A failed allocation lookup (slurmctld restarting) skips one sample; the agent goes on
    and the previous file, with its idle clocks, stays as it was."""
    from slurm_dl.core.errors import SlurmError
    from slurm_dl.cli import gpu_agent_cmd
    from slurm_dl.slurm import cli_backend, node_alloc

    monkeypatch.setattr(nvml_mod, "load_nvml", lambda: RecordedNvml(RECORDED))
    answers = iter(
        [
            SlurmError("squeue --json: Unable to contact slurm controller"),
            [GpuAllocation(77, "ann", "gpu01", (0, 1))],
        ]
    )
    before = tmp_path / "gpu01.prom"
    before.write_text("previous file\n")

    def lookup(self, node=None):
        a = next(answers)
        if isinstance(a, Exception):
            assert before.read_text() == "previous file\n"
            raise a
        return a

    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        if len(sleeps) == 2:
            raise KeyboardInterrupt  # stop the daemon after its second sample

    def no_local_read(self, node):  # as where the agent is not root: each sample reads the queue
        raise SlurmError("scontrol listpids: Permission denied")

    monkeypatch.setattr(cli_backend.CliBackend, "gpu_allocations", lookup)
    # the node-local read would run the host's real scontrol, whose wait sleeps too
    monkeypatch.setattr(node_alloc.NodeAllocations, "_listpids", no_local_read)
    monkeypatch.setattr(gpu_agent_cmd.time, "sleep", sleep)
    res = CliRunner().invoke(
        app, ["gpu-agent", "--interval", "7", "--node", "gpu01", "--output-dir", str(tmp_path)]
    )
    assert res.exit_code == 130, res.output  # the interrupt that stopped it, nothing else
    assert sleeps == [7.0, 7.0]
    assert "cannot read Slurm's GPU allocations" in res.output and "Traceback" not in res.output
    assert "job 77: 2 GPU(s)" in res.output
    assert {s.job_id for s in exposition.parse(before.read_text())} >= {77}
