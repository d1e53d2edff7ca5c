"""GPU agent on shared GPUs: Slurm's shard allocations, each process's job, per-job memory and
compute on a shared GPU, the share a job's shards guarantee and the job over it, in the agent's
file, ``dlsubmit status`` and ``explain``; recorded readings replayed through the agent's NVML path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_dl.dlsubmit.gpu import gpu_cell, gpu_status
from slurm_dl.core.explain import utilisation_lines
from slurm_dl.core.idle.decide import utilisation_entry
from slurm_dl.core.model import Job
from slurm_dl.slurm.gpu_alloc import GpuAllocation, gpu_allocations, parse_idx, parse_shards
from slurm_dl.telemetry import exposition
from slurm_dl.telemetry.agent import pid_jobs, sample_once
from slurm_dl.telemetry.attribution import (
    ShareRule,
    attribute,
    job_of_cgroup,
    over_share,
    summarize,
)
from slurm_dl.telemetry.recorded import RecordedNvml, ReplayError
from slurm_dl.telemetry.samples import GpuSample, JobGpuSample, ProcessSample

GIB = 1 << 30


def shared_gpu(procs, util=60.0, total=80 * GIB, minor=0, t=1000.0) -> GpuSample:
    procs = tuple(procs)
    return GpuSample(
        "gpu01",
        minor,
        minor,
        util,
        sum(p.mem_bytes or 0 for p in procs),
        total,
        200.0,
        tuple(p.pid for p in procs),
        t,
        procs,
    )


def test_slurm_shard_entries_give_the_gpu_and_the_shard_count() -> None:
    assert parse_shards("shard:2(IDX:0)") == ((0,), 2)
    assert parse_shards("shard:h100:3(IDX:1-2)") == ((1, 2), 3)
    assert parse_shards("gpu:h100:1(IDX:0)") == ((), 0)
    assert parse_shards("shard:2(2/8,0/8,0/8,0/8)") == ((0,), 2), "24.11: the job's shards per GPU"
    assert parse_shards("shard:h100:5(0/8,3/8,2/8,0/8)") == ((1, 2), 5)
    assert parse_idx("shard:2(IDX:0)") == (), "a shard is not a whole GPU"
    doc = {
        "jobs": [
            {
                "job_id": 8,
                "job_state": "RUNNING",
                "nodes": "gpu01",
                "user_name": "ann",
                "gres_detail": ["shard:1(IDX:0)"],
            },
            {
                "job_id": 9,
                "job_state": "RUNNING",
                "nodes": "gpu01",
                "user_name": "bob",
                "gres_detail": ["shard:2(IDX:0)"],
            },
            {
                "job_id": 10,
                "job_state": "RUNNING",
                "nodes": "gpu01",
                "user_name": "cy",
                "gres_detail": ["gpu:h100:1(IDX:1)"],
            },
        ]
    }
    assert gpu_allocations(doc) == [
        GpuAllocation(8, "ann", "gpu01", (0,), 1),
        GpuAllocation(9, "bob", "gpu01", (0,), 2),
        GpuAllocation(10, "cy", "gpu01", (1,), 0),
    ]


@pytest.mark.parametrize(
    "text, job",
    [
        ("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n", 4242),  # cgroup v2
        (
            "0::/system.slice/gpu01_slurmstepd.scope/job_9/step_batch\n",
            9,
        ),  # v2, several slurmd on a host
        (
            "12:memory:/slurm/uid_1000/job_77/step_batch\n11:cpu:/slurm/uid_1000/job_77/step_batch\n",
            77,
        ),  # v1
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("0::/system.slice/job_runner.service\n", None),
        # a user's own systemd manager delegates its cgroups: names below it are the user's choice
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_5\n", None),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/x/slurmstepd.scope/job_5/step_0\n",
            None,
        ),
        ("0::/system.slice/job_5/step_0\n", None),  # not under slurmstepd's scope
        ("12:memory:/uid_1000/job_77\n", None),  # v1 outside Slurm's slurm/ tree
    ],
)
def test_a_process_job_from_its_cgroup(text: str, job: int | None) -> None:
    assert job_of_cgroup(text) == job


def _proc(root: Path, pid: int, cgroup: str | None, environ: bytes | None = None) -> None:
    (root / str(pid)).mkdir()
    if cgroup is not None:
        (root / str(pid) / "cgroup").write_text(cgroup)
    if environ is not None:
        (root / str(pid) / "environ").write_bytes(environ)


def test_pid_jobs_reads_proc_and_skips_ended_or_foreign_processes(tmp_path: Path) -> None:
    _proc(tmp_path, 10, "0::/system.slice/slurmstepd.scope/job_5/step_0\n")
    _proc(tmp_path, 11, "0::/init.scope\n")  # slurmstepd lists it (proctrack without cgroups)
    _proc(tmp_path, 12, "0::/init.scope\n")  # in no job, by Slurm's word
    assert pid_jobs([10, 11, 12, 13], proc=tmp_path, slurm_pids={11: 6}) == {10: 5, 11: 6}


def test_a_process_environment_never_names_its_job(tmp_path: Path) -> None:
    """SLURM_JOB_ID is anyone's to set: a process outside every job's cgroup, or in another
    job's, is not charged to the job its environment names."""
    _proc(
        tmp_path, 20, "0::/user.slice/user-1000.slice/session-3.scope\n", b"SLURM_JOB_ID=6\0"
    )  # ssh, no job
    _proc(
        tmp_path, 21, "0::/system.slice/slurmstepd.scope/job_5/step_0\n", b"SLURM_JOB_ID=6\0"
    )  # job 5's
    _proc(
        tmp_path,
        22,
        "0::/user.slice/user-1000.slice/user@1000.service/job_6\n",
        b"SLURM_JOB_ID=6\0",
    )
    assert pid_jobs([20, 21, 22], proc=tmp_path) == {21: 5}
    assert pid_jobs([20, 21, 22], proc=tmp_path, slurm_pids={21: 6}) == {
        21: 5
    }  # the cgroup is Slurm's own


def test_a_process_outside_its_job_is_not_charged_to_the_job_its_environment_names(
    tmp_path: Path,
) -> None:
    """The agent's whole path on a shared GPU: job 9's neighbour runs a process outside any job
    with SLURM_JOB_ID=9; its 30 GiB are charged to no job, so job 9 is not named over its share."""
    _proc(tmp_path, 1, "0::/system.slice/slurmstepd.scope/job_8/step_0\n")
    _proc(tmp_path, 2, "0::/system.slice/slurmstepd.scope/job_9/step_0\n")
    _proc(tmp_path, 3, "0::/user.slice/user-1001.slice/session-7.scope\n", b"SLURM_JOB_ID=9\0")
    readings = tmp_path / "readings.json"
    readings.write_text(
        json.dumps(
            [
                {
                    "minor": 0,
                    "util": 60,
                    "mem_total": 80 * GIB,
                    "processes": [
                        {"pid": 1, "mem": 4 * GIB, "sm_util": 20},
                        {"pid": 2, "mem": 4 * GIB, "sm_util": 20},
                        {"pid": 3, "mem": 30 * GIB, "sm_util": 20},
                    ],
                }
            ]
        )
    )
    allocs = [GpuAllocation(8, "ann", "gpu01", (0,), 1), GpuAllocation(9, "bob", "gpu01", (0,), 1)]
    out = sample_once(
        RecordedNvml.from_file(readings),
        "gpu01",
        lambda node: allocs,
        None,
        now=1000.0,
        jobs_of_pids=lambda pids: pid_jobs(pids, proc=tmp_path),
        shares={"gpu01": ShareRule(8, 10 * GIB)},
    )
    by_job = {s.job_id: s for s in out.samples}
    assert by_job[9].mem_used_bytes == 4 * GIB and not by_job[9].over_share
    assert over_share(out.samples) == {}
    assert (
        by_job[8].processes == by_job[9].processes == 2
    )  # the unknown process keeps both from looking idle


def test_share_of_a_few_shards() -> None:
    assert ShareRule(8, 10 * GIB).share_bytes(2, 80 * GIB) == 20 * GIB
    assert ShareRule(8).share_bytes(2, 80 * GIB) == 20 * GIB, (
        "unset: the GPU's memory / shards per GPU"
    )
    assert ShareRule(8).share_bytes(1, 0) is None, "no memory reading, no share"


def test_a_shared_gpu_is_split_by_process_and_the_job_over_its_share_is_named() -> None:
    s = shared_gpu(
        [
            ProcessSample(1, 15 * GIB, 40.0),
            ProcessSample(2, 4 * GIB, None),
            ProcessSample(3, 1 * GIB, 5.0),
        ]
    )
    allocs = [
        GpuAllocation(8, "ann", "gpu01", (0,), 1),
        GpuAllocation(9, "bob", "gpu01", (0,), 2),
        GpuAllocation(11, "dee", "gpu01", (0,), 1),
    ]
    rows = attribute([s], allocs, {1: 8, 2: 9, 3: 77}, {"gpu01": ShareRule(8, 10 * GIB)})
    by_job = {r.job_id: r for r in rows}
    assert sorted(by_job) == [8, 9, 11], (
        "one row per holder; pid 3's job holds no shard here: left out"
    )
    assert (by_job[8].mem_used_bytes, by_job[8].share_bytes, by_job[8].over_share) == (
        15 * GIB,
        10 * GIB,
        True,
    )
    assert (by_job[9].mem_used_bytes, by_job[9].share_bytes, by_job[9].over_share) == (
        4 * GIB,
        20 * GIB,
        False,
    )
    assert by_job[8].util_percent == 40.0, "NVML's per-process share"
    assert by_job[9].util_percent == 15.0, (
        "no per-process share: what no process accounts for (60 - 40 - 5)"
    )
    assert (by_job[11].util_percent, by_job[11].processes, by_job[11].mem_used_bytes) == (0.0, 0, 0)
    assert over_share(rows) == {8: (15 * GIB, 10 * GIB)}


def test_a_process_whose_job_is_unknown_keeps_every_holder_from_looking_idle() -> None:
    s = shared_gpu([ProcessSample(1, 2 * GIB, None), ProcessSample(2, 3 * GIB, None)], util=50.0)
    allocs = [GpuAllocation(8, "ann", "gpu01", (0,), 1), GpuAllocation(9, "bob", "gpu01", (0,), 1)]
    rows = {r.job_id: r for r in attribute([s], allocs, {1: 8}, {"gpu01": ShareRule(8, 10 * GIB)})}
    assert (rows[8].processes, rows[9].processes) == (2, 1), "pid 2's job unknown: counted for both"
    assert (rows[8].mem_used_bytes, rows[9].mem_used_bytes) == (2 * GIB, 0), (
        "its memory is nobody's"
    )


def test_without_a_site_shard_size_the_share_is_the_gpus_memory_divided() -> None:
    s = shared_gpu([ProcessSample(1, 30 * GIB, None)], util=90.0, total=80 * GIB)
    [row] = attribute(
        [s], [GpuAllocation(8, "ann", "gpu01", (0,), 2)], {1: 8}, {"gpu01": ShareRule(8)}
    )
    assert (row.share_bytes, row.over_share, row.util_percent) == (20 * GIB, True, 90.0)
    [row] = attribute([s], [GpuAllocation(8, "ann", "gpu01", (0,), 2)], {1: 8}, {})
    assert row.share_bytes is None and not row.over_share, (
        "a node the site did not describe: no verdict"
    )


def test_whole_gpus_keep_the_device_figures() -> None:
    s = shared_gpu([ProcessSample(1, 70 * GIB, 10.0)], util=95.0, minor=1)
    [row] = attribute(
        [s], [GpuAllocation(10, "cy", "gpu01", (1,), 0)], {}, {"gpu01": ShareRule(8, 10 * GIB)}
    )
    assert (row.job_id, row.util_percent, row.mem_used_bytes, row.share_bytes) == (
        10,
        95.0,
        70 * GIB,
        None,
    )


def test_a_job_over_its_share_at_its_latest_sample_only() -> None:
    old = JobGpuSample(8, "gpu01", 0, 10.0, 15 * GIB, None, 1, 100.0, share_bytes=10 * GIB)
    new = JobGpuSample(8, "gpu01", 0, 10.0, 5 * GIB, None, 1, 200.0, share_bytes=10 * GIB)
    assert over_share([old, new]) == {}
    two_within = [
        new,
        old,
        JobGpuSample(8, "gpu01", 1, 0.0, 12 * GIB, None, 1, 200.0, share_bytes=10 * GIB),
    ]
    assert over_share(two_within) == {}, "two GPUs summed: 17 GiB of 20 is within"
    assert over_share(
        [new, JobGpuSample(8, "gpu01", 1, 0.0, 16 * GIB, None, 1, 200.0, share_bytes=10 * GIB)]
    ) == {8: (21 * GIB, 20 * GIB)}


def test_the_share_survives_the_agents_file_and_reaches_the_summary_and_explain() -> None:
    rows = [
        JobGpuSample(8, "gpu01", 0, 40.0, 15 * GIB, None, 1, 1000.0, share_bytes=10 * GIB),
        JobGpuSample(10, "gpu01", 1, 95.0, 70 * GIB, 300.0, 1, 1000.0),
    ]
    text = exposition.render(rows)
    assert 'slurm_dl_gpu_share_bytes{job="8",node="gpu01",gpu="0"} 10737418240' in text
    assert 'slurm_dl_gpu_share_bytes{job="10"' not in text, "a whole GPU has no share"
    back = exposition.parse(text)
    assert [(r.job_id, r.share_bytes) for r in back] == [(8, 10 * GIB), (10, None)]
    util = summarize(back)
    entry = utilisation_entry(util[8], None)
    assert (entry["share_bytes"], entry["over_share"]) == (10 * GIB, True)
    assert "share_bytes" not in utilisation_entry(util[10], None)
    lines = utilisation_lines(entry)
    assert any("15.0 GiB used of the 10.0 GiB its shards guarantee" in line for line in lines)
    assert any("OVER its share" in line for line in lines)
    assert all(len(line) <= 80 for line in lines[1:])


def test_dlsubmit_status_names_the_job_over_its_share() -> None:
    job = Job(job_id=8, name="nb", user="nobody", num_gpus=1, nodes=("gpu01",))
    rows = [JobGpuSample(8, "gpu01", 0, 40.0, 15 * GIB, None, 1, 1000.0, share_bytes=10 * GIB)]
    g = gpu_status(job, rows)
    assert g["over_share"] and g["share_bytes"] == 10 * GIB
    cell = gpu_cell({"telemetry": True, "state": "RUNNING", "gpu": g})
    assert cell.startswith("OVER its share: 15.0 GiB of its 10.0 GiB share")
    within = gpu_status(
        job, [JobGpuSample(8, "gpu01", 0, 40.0, 5 * GIB, None, 1, 1000.0, share_bytes=10 * GIB)]
    )
    assert (
        gpu_cell({"telemetry": True, "state": "RUNNING", "gpu": within})
        == "40% of a GPU, 5.0 GiB of its 10.0 GiB share"
    )


def test_recorded_readings_run_the_agents_whole_path(tmp_path: Path) -> None:
    readings = [
        {
            "minor": 0,
            "util": 60,
            "mem_total": 80 * GIB,
            "processes": [{"pid": 1, "mem": 15 * GIB, "sm_util": 40}, {"pid": 2, "mem": 4 * GIB}],
        },
        {"minor": 1, "util": 0, "mem_total": 80 * GIB},
    ]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(readings))
    allocs = [GpuAllocation(8, "ann", "gpu01", (0,), 1), GpuAllocation(9, "bob", "gpu01", (0,), 2)]
    out = sample_once(
        RecordedNvml.from_file(path),
        "gpu01",
        lambda node: allocs,
        tmp_path / "agents",
        now=1000.0,
        jobs_of_pids=lambda pids: {1: 8, 2: 9},
        shares={"gpu01": ShareRule(8, 10 * GIB)},
    )
    assert out.gpus == 2
    assert out.jobs[8].share_bytes == 10 * GIB and out.jobs[8].mem_used_bytes == 15 * GIB
    written = tmp_path / "agents" / "gpu01.prom"
    assert over_share(exposition.parse(written.read_text())) == {8: (15 * GIB, 10 * GIB)}
    assert written.stat().st_mode & 0o777 == 0o644, "users' dlsubmit status reads it"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"gpus": 1}, "expected a list of GPUs"),
        ([{"util": 5}], "GPU 0: mem_total (the GPU's memory in bytes) is required"),
        ([{"mem_total": 1, "util": "x"}], "GPU 0: util must be a number >= 0, not 'x'"),
        (
            [{"mem_total": 1, "processes": [{"mem": 3}]}],
            "GPU 0: processes must be a list of objects with a pid",
        ),
        (
            [{"mem_total": 1, "processes": [{"pid": 1, "mem": -3}]}],
            "GPU 0: mem must be a number >= 0, not -3",
        ),
    ],
)
def test_bad_readings_are_refused_with_what_and_where(tmp_path: Path, data, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReplayError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RecordedNvml.from_file(path)
    path.write_text("{not json")
    with pytest.raises(ReplayError, match="not JSON"):
        RecordedNvml.from_file(path)
