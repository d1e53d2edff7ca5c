"""Shard jobs packed onto GPUs already shared before another GPU is opened (the prioritizer's
placement of waiting shard jobs; pure)."""

from __future__ import annotations

from slurm_dl.core.model import Job, Node
from slurm_dl.core.steering import choose_shard_nodes

SPG = {"gpu01": 8, "gpu02": 8, "gpu03": 8}


def nodes(free: dict[str, int], gpus: int = 4) -> list[Node]:
    return [Node(name, gpus=gpus, gpus_used=gpus - f, gpu_type="h100") for name, f in free.items()]


def waiting(*shards: int) -> list[Job]:
    return [Job(job_id=i + 1, shards=k) for i, k in enumerate(shards)]


def test_a_shard_job_joins_a_shared_gpu_rather_than_open_a_whole_one() -> None:
    # gpu01: 4 whole GPUs free; gpu02: GPU 1 has 5 of 8 shards in use (4 free by Slurm's count)
    out = choose_shard_nodes(waiting(2), nodes({"gpu01": 4, "gpu02": 4}), SPG, {"gpu02": {1: 5}})
    assert out[1].node == "gpu02" and out[1].joins_shared
    assert (
        out[1].why
        == "joins GPU 1 of gpu02, already shared (5 of 8 shards in use): whole GPUs stay free"
    )


def test_the_tightest_shared_gpu_is_filled_first() -> None:
    used = {"gpu01": {0: 2}, "gpu02": {3: 6}}
    out = choose_shard_nodes(waiting(2, 2), nodes({"gpu01": 4, "gpu02": 4}), SPG, used)
    assert (out[1].node, out[2].node) == ("gpu02", "gpu01"), (
        "gpu02's GPU is then full; the next goes to gpu01's"
    )


def test_a_job_too_big_for_any_shared_gpu_opens_one_on_the_node_with_fewest_whole_gpus() -> None:
    used = {"gpu01": {0: 7}}
    out = choose_shard_nodes(waiting(4), nodes({"gpu01": 4, "gpu02": 1, "gpu03": 3}), SPG, used)
    assert out[1].node == "gpu02" and not out[1].joins_shared
    assert "fewest whole GPUs free (1)" in out[1].why


def test_jobs_of_one_cycle_pack_onto_the_gpu_the_first_opened() -> None:
    out = choose_shard_nodes(waiting(3, 3, 2, 1), nodes({"gpu01": 2, "gpu02": 4}), SPG, {})
    assert [out[j].node for j in (1, 2, 3, 4)] == ["gpu01"] * 4
    assert [out[j].joins_shared for j in (1, 2, 3, 4)] == [False, True, True, False], (
        "3+3+2 fill one GPU"
    )


def test_whole_gpu_jobs_nodes_without_shards_and_full_nodes_are_left_alone() -> None:
    jobs = [Job(job_id=1, num_gpus=1), Job(job_id=2, shards=2)]
    out = choose_shard_nodes(jobs, nodes({"gpu01": 0, "gpu04": 4}), {"gpu01": 8}, {"gpu01": {}})
    assert out == {}, "gpu01 has no GPU free, gpu04 offers no shards, job 1 wants a whole GPU"
    # a node whose free GPUs all carry shards has no whole one to open
    out = choose_shard_nodes(waiting(3), nodes({"gpu01": 2}), SPG, {"gpu01": {0: 6, 1: 7}})
    assert out == {}


class PinningBackend:
    """Slurm's running shard allocations and the ReqNodeList updates the daemon makes."""

    def __init__(self, allocs) -> None:
        self.allocs = allocs
        self.updates: list[tuple[int, str]] = []

    def gpu_allocations(self, node=None):
        return list(self.allocs)

    def set_nodes(self, job_id: int, nodes: str) -> None:
        self.updates.append((job_id, nodes))


def test_the_daemon_pins_a_waiting_shard_job_once_and_lets_it_go_when_no_node_has_room() -> None:
    from pathlib import Path

    from prioritizer.steer import ShardSteering
    from slurm_dl.core.config import SharingConfig, SharingGroup
    from slurm_dl.cli.config_file import load_config
    from slurm_dl.core.model import ClusterSnapshot, JobState
    from slurm_dl.slurm.gpu_alloc import GpuAllocation

    config = load_config(Path(__file__).resolve().parents[2] / "site-configs" / "testbed.toml")
    group = config.node_groups[0]
    config = config.model_copy(
        update={
            "sharing": SharingConfig(groups=[SharingGroup(node_group=group.name, shards_per_gpu=8)])
        }
    )
    st = ShardSteering(config)
    first, second = group.node_names[:2]
    backend = PinningBackend([GpuAllocation(7, "u", second, (2,), 3)])
    job = Job(job_id=9, shards=2, state=JobState.PENDING)
    snap = ClusterSnapshot(taken_at=0.0, jobs=[job], nodes=nodes({first: 8, second: 8}, gpus=8))
    changed, errors = st.step(backend, snap, [job])
    assert errors == [] and changed[9].node == second and backend.updates == [(9, second)]
    assert st.step(backend, snap, [job]) == ({}, []) and backend.updates == [(9, second)], (
        "pinned once"
    )
    full = ClusterSnapshot(taken_at=0.0, jobs=[job], nodes=nodes({first: 0, second: 0}, gpus=8))
    backend.allocs = []
    st.step(backend, full, [job])
    assert backend.updates[-1] == (9, ""), "no room anywhere: any node again"
    dry = ShardSteering(config)
    dry.step(backend, snap, [job], dry_run=True)
    assert backend.updates[-1] == (9, ""), "a dry run changes nothing"
