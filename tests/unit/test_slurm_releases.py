"""The Slurm edge reads every supported release the same way, from output recorded live.

tests/data/slurm-R/ holds what Slurm R printed for one fixed scenario (scripts/
capture_slurm_golden.py): a running ``--gpus=3`` job with a comment, a held 4-node
``--gres=gpu:h100:8`` job, a finished ``--gres=gpu:h100:2`` job and a requeued, held
``--gpus-per-node=2`` job. Each release's JSON and text must give the same Job and Node objects.
No Slurm needed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from slurm_dl.core.errors import SlurmError
from slurm_dl.core.model import JobState
from slurm_dl.slurm.dialects import (
    SUPPORTED,
    dialect_for_release,
    dialect_of,
    release_of_version,
    state_text,
)
from slurm_dl.slurm.gpu_alloc import gpu_allocations
from slurm_dl.slurm.parse import (
    parse_gpu_request,
    parse_scontrol_records,
    parse_sinfo_json,
    parse_squeue_json,
)
from slurm_dl.slurm.sacct import parse_sacct_json
from slurm_dl.slurm.squeue_format import parse_squeue_format

DATA = Path(__file__).resolve().parents[1] / "data"
RELEASES = sorted(SUPPORTED)
ALL = set(JobState)


def load(release: str, name: str):
    text = (DATA / f"slurm-{release}" / name).read_text()
    return json.loads(text) if name.endswith(".json") else text


def scenario(release: str) -> dict[str, int]:
    return load(release, "scenario.json")


@pytest.fixture(params=RELEASES)
def release(request: pytest.FixtureRequest) -> str:
    return request.param


def test_every_supported_release_has_recorded_output() -> None:
    assert sorted(p.name.removeprefix("slurm-") for p in DATA.glob("slurm-*")) == RELEASES


def test_release_and_data_parser_are_detected(release: str) -> None:
    assert release_of_version(load(release, "scontrol_version.txt")) == release
    dialect = dialect_for_release(release)
    for name in ("squeue.json", "nodes.json", "sacct.json"):
        assert dialect_of(load(release, name)) == dialect


def _jobs_by_name(jobs):
    return {j.name: j for j in jobs}


def test_squeue_json_gives_the_scenario_jobs(release: str) -> None:
    ids = scenario(release)
    jobs = _jobs_by_name(parse_squeue_json(load(release, "squeue.json"), ALL))
    run3, held, requeued = (jobs[f"contract-{k}"] for k in ("run3", "held", "requeued"))
    assert (run3.job_id, run3.state, run3.num_gpus, run3.gpu_type, run3.nodes) == (
        ids["run3"],
        JobState.RUNNING,
        3,
        "h100",
        ("gpu01",),
    )
    assert run3.comment == "hello contract" and run3.time_limit == 30 * 60 and run3.start_time
    assert (
        held.state,
        held.state_reason,
        held.num_gpus,
        held.gpus_per_node,
        held.num_nodes,
        held.gpu_type,
    ) == (JobState.PENDING, "JobHeldUser", 32, 8, 4, "h100")
    assert held.start_time is None and held.nodes == ()
    # 22.05's squeue --json also lists recently finished jobs (ignoring its filters); later ones do not.
    if "contract-done" in jobs:
        assert jobs["contract-done"].state is JobState.COMPLETED
    assert (requeued.state, requeued.restarts, requeued.gpus_per_node) == (JobState.PENDING, 1, 2)
    # By default only pending and active jobs.
    assert {j.name for j in parse_squeue_json(load(release, "squeue.json"))} == {
        "contract-run3",
        "contract-held",
        "contract-requeued",
    }


def test_squeue_format_and_json_readers_agree(release: str) -> None:
    """The fast reader (squeue -O) and the JSON reader give the same jobs on every release."""
    by_json = {j.job_id: j for j in parse_squeue_json(load(release, "squeue.json"), ALL)}
    by_format = {j.job_id: j for j in parse_squeue_format(load(release, "squeue_format.txt"), ALL)}
    assert set(by_json) <= set(by_format) and len(by_format) == 4
    for job_id, j in by_json.items():
        f = by_format[job_id]
        # squeue -O has no gres_detail: a running job's GPU type comes from its nodes later.
        for field in (
            "state",
            "state_reason",
            "num_gpus",
            "gpus_per_node",
            "num_nodes",
            "user",
            "name",
            "partition",
            "submit_time",
            "time_limit",
            "restarts",
            "nodes",
            "priority",
            "nice",
            "comment",
        ):
            assert getattr(f, field) == getattr(j, field), (release, job_id, field)


def test_nodes_are_read_the_same(release: str) -> None:
    nodes = {n.name: n for n in parse_sinfo_json(load(release, "nodes.json"))}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert {
        (n.gpus, n.gpu_type, n.cpus, n.memory_mb, n.partitions, n.available) for n in nodes.values()
    } == {(8, "h100", 32, 256000, ("gpu",), True)}
    assert sum(n.gpus_used for n in nodes.values()) == 3
    assert nodes["gpu01"].state == "MIXED" and nodes["gpu04"].state == "IDLE"


def test_gpu_indices_of_running_jobs(release: str) -> None:
    allocs = gpu_allocations(load(release, "squeue.json"))
    assert [(a.job_id, a.node, a.gpus) for a in allocs] == [
        (scenario(release)["run3"], "gpu01", (0, 1, 2))
    ]


def test_sacct_gives_the_finished_job(release: str) -> None:
    (done,) = parse_sacct_json(load(release, "sacct.json"))
    assert (done.job_id, done.name, done.state, done.num_gpus, done.num_nodes, done.nodes) == (
        scenario(release)["done"],
        "contract-done",
        JobState.COMPLETED,
        2,
        1,
        ("gpu01",),
    )
    assert done.time_limit == 5 * 60 and done.start_time and done.submit_time


def test_scontrol_show_job_fields(release: str) -> None:
    ids = scenario(release)
    recs = {
        int(r["JobId"]): r for r in parse_scontrol_records(load(release, "scontrol_show_job.txt"))
    }
    assert recs[ids["run3"]]["JobState"] == "RUNNING"
    assert parse_gpu_request(recs[ids["run3"]]["TresPerJob"]).count == 3
    assert parse_gpu_request(recs[ids["held"]]["TresPerNode"]).count == 8
    assert recs[ids["requeued"]]["Restarts"] == "1"
    assert recs[ids["done"]]["JobState"] == "COMPLETED"


def test_a_newer_data_parser_is_refused_naming_the_supported_ones() -> None:
    doc = copy.deepcopy(load("24.11", "squeue.json"))
    doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.99"
    doc["meta"]["slurm"]["release"] = "27.11.0"
    with pytest.raises(SlurmError) as err:
        parse_squeue_json(doc)
    msg = str(err.value)
    assert (
        "27.11" in msg and "v0.0.99" in msg and "22.05" in msg and "24.11" in msg and "26.05" in msg
    )
    with pytest.raises(SlurmError, match="Slurm 23.02 is not supported; supported: 22.05"):
        dialect_for_release("23.02", "scontrol version")


def test_state_lists_read_as_22_05_printed_them() -> None:
    assert state_text(["RUNNING"]) == "RUNNING"
    assert state_text(["COMPLETED", "COMPLETING"]) == "COMPLETING"
    assert state_text(["PENDING", "REQUEUED"]) == "REQUEUED"
    assert state_text("PENDING") == "PENDING" and state_text([]) == ""


def test_pyslurm_must_match_the_clusters_release() -> None:
    from slurm_dl.slurm.pyslurm_backend import release_mismatch, slurm_release_of_pyslurm

    assert (
        slurm_release_of_pyslurm("22.5.3") == "22.05"
        and slurm_release_of_pyslurm("24.11.0") == "24.11"
    )
    assert (
        release_mismatch("22.5.3", "22.05") is None and release_mismatch("24.11.0", "24.11") is None
    )
    mismatch = release_mismatch("22.5.3", "24.11")
    assert mismatch.startswith(
        "pyslurm 22.5.3 is installed, built for Slurm 22.05,\n  but Slurm here is 24.11:\n"
        "  build pyslurm 24.11.x against this Slurm's libslurm"
    )
    assert '[slurm] backend = "cli"' in mismatch
    assert all(len(line) <= 80 for line in mismatch.splitlines())
    assert (
        release_mismatch(None, "26.05")
        == release_mismatch("24.11.0", "26.05")
        == (
            "Slurm here is 26.05: no pyslurm exists for it;\n"
            '  or choose the cli backend: --backend cli, or [slurm] backend = "cli"'
        )
    )
