"""No gpu-agent file stops a prioritizer cycle or ``dlsubmit status``, whatever it holds.

The exposition parser is fed random text and bytes, and lines that look like the agent's with
random labels and values (NaN, inf, -inf, 1e400, 400-digit integers, negative counts, huge
timestamps, bad labels). It never raises, and every sample it returns is finite and sane; those
samples then go through everything that reads them (the per-job summary, the idle policy, the
idle notes, ``dlsubmit status``'s GPU cell and --json). A bad line is skipped on its own: the
other lines of the same file are still used.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_dl.dlsubmit.gpu import gpu_cell, gpu_status
from slurm_dl.dlsubmit.status import describe_jobs, print_status
from slurm_dl.core.config import TelemetryConfig
from slurm_dl.core.idle.decide import decide, utilisation_entry
from slurm_dl.core.model import Job, JobState
from slurm_dl.core.idle.notice import action_note, warning_note
from slurm_dl.telemetry import exposition
from slurm_dl.telemetry.attribution import summarize
from slurm_dl.telemetry.exposition import (
    MAX_BYTES,
    MAX_GPU_INDEX,
    MAX_JOB_ID,
    MAX_PROCESSES,
    MAX_TIME,
    MAX_WATTS,
    NODE_NAME,
    METRICS,
)
from slurm_dl.telemetry.reader import read_exposition_dir
from slurm_dl.telemetry.samples import JobGpuSample
from slurm_dl.telemetry.summary import JobUtilisationSummary, fold_samples

from test_telemetry_prioritizer import agent_writes, scene  # the prioritizer scene (same directory)

from prioritizer import Prioritizer

HUGE = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "+inf",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e400",
    "1e308",
    "4e18",
    "9" * 400,
    "-" + "9" * 400,
    "1" + "0" * 4301,
    "-1",
    "-0",
    "0x10",
    "1_000",
    "",
    "1e-400",
    "١٢",
]
LABEL = st.one_of(
    st.integers(-5, 10**12).map(str),
    st.sampled_from(["9" * 400, "-1", "", "x", "١", "0" * 30]),
    st.text(max_size=12),
)
NODE = st.one_of(
    st.sampled_from(["gpu01", "gpu99", "", "a b", 'x"y', "../etc", "é", "-n", "n" * 300]),
    st.text(max_size=12),
)
VALUE = st.one_of(
    st.sampled_from(HUGE),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**400), 10**400).map(str),
    st.floats(0, 200).map(repr),
    st.text(max_size=8),
)
STAMP = st.one_of(
    st.integers(0, 10**20).map(str),
    st.sampled_from(["9" * 400, "-1", "1e12", "", "inf"]),
    st.just("1763700000000"),
    st.text(max_size=6),
)


@st.composite
def agent_like_line(draw) -> str:
    name = draw(st.one_of(st.sampled_from(sorted(METRICS)), st.text(max_size=10)))
    job, gpu = draw(LABEL), draw(LABEL)
    line = f'{name}{{job="{job}",node="{draw(NODE)}",gpu="{gpu}"}} {draw(VALUE)} {draw(STAMP)}'
    return draw(
        st.sampled_from([line, " " + line, line + " x", line.replace('"', "", 1), "# " + line])
    )


@st.composite
def agent_like_file(draw) -> str:
    """Whole GPUs' worth of lines (every metric of a few job/node/GPU/time keys), most values sane,
    some not, mixed with random lines: the parser's sane path is taken as well as its refusals."""
    sane = {
        "util_percent": st.floats(0, 100).map(repr),
        "mem_used_bytes": st.integers(0, 2**40).map(str),
        "power_watts": st.floats(0, 1000).map(repr),
        "processes": st.integers(0, 8).map(str),
        "idle_since": st.sampled_from(["1763699000", "1763700000.5", "0"]),
        "share_bytes": st.integers(0, 2**40).map(str),
        "energy_joules": st.floats(0, 1e9).map(repr),
        "energy_gpu_seconds": st.floats(0, 1e7).map(repr),
        "energy_since": st.sampled_from(["1763699000", "1763700000.5", "1763800000"]),
        "counter_joules": st.floats(0, 1e12).map(repr),
    }
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        job = draw(st.sampled_from(["0", "7", "7", "8", "9" * 12]))
        node = draw(st.sampled_from(["gpu01", "gpu01", "gpu99", "x y"]))
        gpu = draw(st.sampled_from(["0", "1", "70000"]))
        ms = draw(
            st.sampled_from(
                ["1763700000000", "1763700000000", "1763700060000", "1" + "0" * 16, "9" * 400, "0"]
            )
        )
        for name, (_, attr) in METRICS.items():
            value = draw(VALUE if draw(st.integers(0, 9)) == 0 else sane[attr])
            lines.append(f'{name}{{job="{job}",node="{node}",gpu="{gpu}"}} {value} {ms}')
    lines += draw(st.lists(st.one_of(agent_like_line(), st.text(max_size=40)), max_size=10))
    return "\n".join(draw(st.permutations(lines)))


TEXT = st.one_of(
    st.lists(st.one_of(agent_like_line(), st.text(max_size=40)), max_size=40).map("\n".join),
    agent_like_file(),
)


def assert_sane(samples: list[JobGpuSample]) -> None:
    for s in samples:
        assert isinstance(s.job_id, int) and 0 <= s.job_id <= MAX_JOB_ID
        assert isinstance(s.gpu, int) and 0 <= s.gpu <= MAX_GPU_INDEX
        assert NODE_NAME.fullmatch(s.node)
        assert math.isfinite(s.util_percent) and 0 <= s.util_percent <= 100
        assert isinstance(s.mem_used_bytes, int) and 0 <= s.mem_used_bytes <= MAX_BYTES
        assert isinstance(s.processes, int) and 0 <= s.processes <= MAX_PROCESSES
        assert s.power_watts is None or (
            math.isfinite(s.power_watts) and 0 <= s.power_watts <= MAX_WATTS
        )
        assert math.isfinite(s.time) and 0 <= s.time <= MAX_TIME
        assert s.idle_since is None or 0 <= s.idle_since <= s.time
        assert s.share_bytes is None or (
            isinstance(s.share_bytes, int) and 0 <= s.share_bytes <= MAX_BYTES
        )


def readers_of(samples: list[JobGpuSample]) -> None:
    """Everything downstream of the parser, on the samples it returned: none of it may raise."""
    cfg = TelemetryConfig(idle_minutes=1.0, warn_grace_minutes=1.0, idle_action="cancel")
    jobs = {
        s.job_id: Job(
            job_id=s.job_id,
            state=JobState.RUNNING,
            num_gpus=1,
            nodes=(s.node,),
            comment="dl:ckpt=1",
        )
        for s in samples
        if s.job_id
    }
    for util in summarize(samples).values():
        json.dumps(utilisation_entry(util, None), allow_nan=False)
    for d in decide(samples, jobs, cfg):
        warning_note(d, cfg), action_note(d)
    for job in jobs.values():
        summary = JobUtilisationSummary(job.job_id)
        fold_samples(summary, samples, cfg.idle_util_percent)
        json.dumps(summary.to_dict(), allow_nan=False)
        row = gpu_status(job, samples)
        json.dumps(row, allow_nan=False)
        gpu_cell({"telemetry": True, "state": "RUNNING", "gpu": row})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
def test_the_parser_never_raises_and_returns_only_sane_samples(text: str) -> None:
    samples, bad = exposition.parse_counted(text)
    assert bad >= 0
    assert_sane(samples)
    readers_of(samples)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=2000), TEXT.map(str.encode)))
def test_any_file_in_the_directory_is_read_without_raising(tmp_path_factory, data: bytes) -> None:
    d = tmp_path_factory.mktemp("agents")
    (d / "gpu01.prom").write_bytes(data)
    (d / "gpu01.prom").chmod(0o644)  # as the agent writes it, whatever the umask
    samples = read_exposition_dir(d)
    assert_sane(samples)
    readers_of(samples)


GOOD = 'slurm_dl_gpu_utilization_percent{job="7",node="gpu01",gpu="0"} 0 1763700000000'


def good_file(*bad: str) -> str:
    """The agent's lines for job 7's idle GPU 0, then ``bad`` lines for the same GPU (a later line
    of the same metric would replace the earlier one: a bad one must not)."""
    return (
        "\n".join(
            [
                GOOD,
                GOOD.replace("utilization_percent", "processes"),
                GOOD.replace("utilization_percent", "memory_used_bytes").replace("} 0 ", "} 1024 "),
                *bad,
            ]
        )
        + "\n"
    )


def test_a_non_finite_or_huge_value_skips_its_line_only() -> None:
    """inf memory or processes, a 400-digit timestamp: each line skipped, the GPU's sample kept."""
    bad = [
        'slurm_dl_gpu_memory_used_bytes{job="7",node="gpu01",gpu="0"} inf 1763700000000',
        'slurm_dl_gpu_processes{job="7",node="gpu01",gpu="0"} nan 1763700000000',
        'slurm_dl_gpu_processes{job="7",node="gpu01",gpu="0"} -1 1763700000000',
        'slurm_dl_gpu_power_watts{job="7",node="gpu01",gpu="0"} 1e400 1763700000000',
        f'slurm_dl_gpu_utilization_percent{{job="7",node="gpu01",gpu="0"}} 5 {"9" * 400}',
        f'slurm_dl_gpu_idle_since_seconds{{job="7",node="gpu01",gpu="0"}} {"9" * 400} 1763700000000',
        'slurm_dl_gpu_idle_since_seconds{job="7",node="gpu01",gpu="0"} 1e300 1763700000000',
        f'slurm_dl_gpu_memory_used_bytes{{job="{"9" * 400}",node="gpu01",gpu="0"}} 1 1763700000000',
    ]
    samples, skipped = exposition.parse_counted(good_file(*bad))
    assert skipped == len(bad)
    assert samples == [JobGpuSample(7, "gpu01", 0, 0.0, 1024, None, 0, 1_763_700_000.0)]


def test_a_gpu_without_its_utilisation_or_process_count_is_not_taken_for_idle() -> None:
    only_memory = GOOD.replace("utilization_percent", "memory_used_bytes")
    assert exposition.parse(only_memory) == []


def test_dlsubmit_status_shows_the_sane_lines_of_a_file_with_inf(tmp_path: Path, capsys) -> None:
    (tmp_path / "gpu01.prom").write_text(
        good_file('slurm_dl_gpu_memory_used_bytes{job="7",node="gpu01",gpu="0"} inf 1763700000000')
    )
    (tmp_path / "gpu01.prom").chmod(0o644)
    job = Job(job_id=7, name="j", state=JobState.RUNNING, nodes=("gpu01",))
    rows = describe_jobs([job], 7, None, read_exposition_dir(tmp_path))
    assert rows[0]["gpu"]["mem_used_bytes"] == 1024
    json.dumps(rows, allow_nan=False)
    print_status(rows, detail=True)
    assert "0% of 1 GPU(s)" in capsys.readouterr().out


def test_a_bad_line_in_an_agents_file_stops_no_cycle(tmp_path: Path) -> None:
    """The agent's file with an inf line appended: every cycle runs; the idle job is still warned
    and cancelled, the busy one left alone."""
    config, c, store = scene(tmp_path)
    p = Prioritizer(config, c, store)
    agents = tmp_path / "agents"
    for _ in range(17):
        agent_writes(agents, c.now)
        with open(agents / "gpu01.prom", "a") as f:
            f.write(
                f'slurm_dl_gpu_processes{{job="1",node="gpu01",gpu="0"}} inf {round(c.now * 1000)}\n'
                f'slurm_dl_gpu_memory_used_bytes{{job="2",node="gpu01",gpu="2"}} inf {round(c.now * 1000)}\n'
                f'slurm_dl_gpu_utilization_percent{{job="2",node="gpu01",gpu="3"}} 0 {"9" * 400}\n'
            )
        p.run_cycle()
        c.now += 60
    assert c.cancelled == [2]
    assert 1 in c.jobs and c.jobs[1].running
