"""The GPU agent on real NVML: runs only where NVML sees a GPU (skipped everywhere else).

What the stand-in tests in tests/unit cannot show: that the real driver answers every call the
sampler makes, that the minor numbers match the /dev/nvidiaN files Slurm's gres.conf names, and
that a process computing on a GPU shows up in the agent's file as a busy job with a process.
The load is a child process using PyTorch or CuPy, whichever the machine has.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_dl.slurm.gpu_alloc import GpuAllocation
from slurm_dl.telemetry.agent import sample_once
from slurm_dl.telemetry.attribution import ShareRule
from slurm_dl.telemetry.exposition import parse
from slurm_dl.telemetry.nvml import NvmlUnavailableError, load_nvml, sample_gpus

NODE = "gpu-test"
GIB = 1 << 30

LOAD = r"""
import sys, time
try:
    import torch
    assert torch.cuda.is_available()
    x = torch.randn(8192, 8192, device="cuda")
    keep = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    sync = torch.cuda.synchronize
    step = lambda: x @ x
except Exception:
    import cupy
    x = cupy.random.standard_normal((8192, 8192), dtype=cupy.float32)
    keep = cupy.empty(2 << 30, dtype=cupy.uint8)
    sync = cupy.cuda.Device().synchronize
    step = lambda: x @ x
step(); sync()
print("ready", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        step()
    sync()
"""


@pytest.fixture(scope="module")
def nvml():
    try:
        lib = load_nvml()
    except NvmlUnavailableError as e:
        pytest.skip(str(e))
    if lib.nvmlDeviceGetCount() == 0:
        pytest.skip("NVML sees no GPU on this machine")
    yield lib
    lib.nvmlShutdown()


def _has_cuda_library() -> bool:
    probe = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('torch') or u.find_spec('cupy') else 1)"
    return subprocess.run([sys.executable, "-c", probe]).returncode == 0


@pytest.fixture
def gpu_load():
    """A child computing on GPU 0 (CUDA_DEVICE_ORDER=PCI_BUS_ID, as NVML counts) for up to 90 s."""
    if not _has_cuda_library():
        pytest.skip("neither PyTorch nor CuPy is installed to put load on the GPU")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    proc = subprocess.Popen(
        [sys.executable, "-c", LOAD, "90"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout.readline().strip() == "ready", "the GPU load did not start"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _gpu0_when(nvml, pred, within_s: float = 20.0):
    """Samples of GPU 0 until ``pred`` holds (or the last one after ``within_s``)."""
    end = time.monotonic() + within_s
    while True:
        s = sample_gpus(nvml, NODE, time.time())[0]
        if pred(s) or time.monotonic() > end:
            return s
        time.sleep(0.5)


def test_every_gpu_answers_and_minors_match_device_files(nvml) -> None:
    samples = sample_gpus(nvml, NODE, time.time())
    assert len(samples) == nvml.nvmlDeviceGetCount() >= 1
    if shutil.which("nvidia-smi"):
        listed = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, check=True
        ).stdout
        assert len([ln for ln in listed.splitlines() if ln.startswith("GPU ")]) == len(samples)
    for s in samples:
        assert s.mem_total_bytes > GIB, s
        assert 0.0 <= s.util_percent <= 100.0, s
        assert s.minor is not None, f"NVML gave no minor number for GPU {s.index}"
        assert Path(f"/dev/nvidia{s.minor}").exists(), f"no /dev/nvidia{s.minor} for GPU {s.index}"
        assert s.power_watts is None or 0.0 < s.power_watts < 2000.0, s
    print(
        "\nreal NVML:",
        [
            (s.index, s.minor, s.util_percent, s.mem_used_bytes >> 20, s.power_watts, s.pids)
            for s in samples
        ],
    )


def test_a_computing_process_is_a_busy_job_with_a_process(nvml, gpu_load, tmp_path: Path) -> None:
    s = _gpu0_when(nvml, lambda s: s.util_percent >= 50 and s.mem_used_bytes >= 2 * GIB)
    print(
        f"\nunder load: util {s.util_percent}%, {s.mem_used_bytes >> 20} MiB, "
        f"{s.power_watts} W, pids {s.pids} (load pid {gpu_load.pid})"
    )
    assert s.util_percent >= 50, s
    assert s.mem_used_bytes >= 2 * GIB, s

    job = 4242
    alloc = [GpuAllocation(job, "ann", NODE, (s.slurm_index,))]
    result = sample_once(nvml, NODE, lambda node: alloc, tmp_path)
    assert result.written is not None
    mine = [r for r in parse(result.written.read_text()) if r.job_id == job]
    assert len(mine) == 1 and mine[0].gpu == s.slurm_index
    assert mine[0].util_percent > 0 and mine[0].mem_used_bytes >= 2 * GIB
    assert mine[0].idle_since is None, "a computing GPU was written as idle"
    assert result.jobs[job].processes >= 1, (
        "NVML listed no process on a GPU a process computes on: the idle rule (no process and "
        "low utilisation) would rely on utilisation alone here"
    )


def test_a_shared_gpu_is_split_by_the_real_process_list(nvml, gpu_load, tmp_path: Path) -> None:
    """GPU 0 as if held through shards by two jobs: the load's process belongs to one (its pid as
    the cgroup or SLURM_JOB_ID lookup would give it), the other has none. NVML's process list
    must carry the load's pid and its memory, so the split names the load's job, and only it,
    over a 1 GiB share."""
    s = _gpu0_when(
        nvml, lambda s: any(p.pid == gpu_load.pid and (p.mem_bytes or 0) >= GIB for p in s.procs)
    )
    print(
        f"\nprocesses on GPU 0: {[(p.pid, (p.mem_bytes or 0) >> 20, p.sm_util_percent) for p in s.procs]} "
        f"(load pid {gpu_load.pid})"
    )
    [load] = [p for p in s.procs if p.pid == gpu_load.pid]
    assert load.mem_bytes is not None and load.mem_bytes >= GIB, (
        "NVML gave no per-process memory: a job over its share could not be named on this driver"
    )
    alloc = [
        GpuAllocation(4242, "ann", NODE, (s.slurm_index,), 1),
        GpuAllocation(4343, "bob", NODE, (s.slurm_index,), 1),
    ]
    result = sample_once(
        nvml,
        NODE,
        lambda node: alloc,
        tmp_path,
        jobs_of_pids=lambda pids: {gpu_load.pid: 4242},
        shares={NODE: ShareRule(80, GIB)},
    )
    rows = {r.job_id: r for r in parse(result.written.read_text()) if r.gpu == s.slurm_index}
    assert rows[4242].mem_used_bytes >= GIB and rows[4242].over_share, rows
    assert rows[4343].mem_used_bytes == 0 and not rows[4343].over_share, rows


def test_gpu_agent_once_on_a_gpu_node_without_slurm_says_what_failed(nvml, tmp_path: Path) -> None:
    repo = str(Path(__file__).resolve().parents[2])
    env = dict(
        os.environ,
        PATH="/usr/bin:/bin",
        PYTHONPATH=os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p),
    )
    if shutil.which("squeue", path=env["PATH"]):
        pytest.skip("Slurm commands are installed here; this checks a node without them")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "gpu-agent",
            "--once",
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    out = res.stdout + res.stderr
    print("\n" + out)
    assert res.returncode == 1 and "Traceback" not in out
    assert "squeue: command not found" in out
