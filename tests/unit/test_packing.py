"""Packing: fewest nodes, best fit, whole nodes for 8k, 8k+r, switches, shapes."""

from __future__ import annotations

import pytest

from slurm_dl.core.model import Job, Node, Switch, Topology
from slurm_dl.core.packing import job_allocation, pack, request_shape


def cluster(used, gpus=8, gpu_type="h100"):
    return [Node(f"n{i}", gpus, gpu_type, gpus_used=u) for i, u in enumerate(used)]


def test_request_shape():
    assert request_shape(16, 8).per_node == (8, 8)
    s = request_shape(16, 8)
    assert (s.num_nodes, s.gpus_per_node) == (2, 8)
    s = request_shape(12, 8)
    assert s.per_node == (8, 4) and (s.num_nodes, s.gpus_per_node) == (2, 6)
    s = request_shape(9, [4, 8])
    assert s.per_node == (8, 1) and s.gpus_per_node is None
    assert request_shape(3, 8).per_node == (3,)
    with pytest.raises(ValueError):
        request_shape(0, 8)


def test_small_job_goes_to_the_best_fit_node():
    nodes = cluster([0, 5, 6, 5])  # free 8, 3, 2, 3
    assert pack(2, nodes).allocation == (("n2", 2),)  # fewest free that fit
    assert pack(3, nodes).allocation == (("n1", 3),)  # tie 3 vs 3: lowest index
    assert pack(4, nodes).allocation == (("n0", 4),)
    assert pack(9, cluster([0, 4, 4])).allocation == (("n0", 8), ("n1", 1))
    assert pack(9, cluster([1, 4, 4])) is None  # 8+1 needs a whole node; 7+... does not count


def test_8k_needs_k_whole_nodes_and_8k_plus_r_one_more():
    nodes = cluster([1, 0, 0, 6, 0])  # free 7, 8, 8, 2, 8
    p = pack(16, nodes)
    assert sorted(p.nodes) == ["n1", "n2"] and not p.spread
    p = pack(18, nodes)  # 2 whole + 2 on the best-fit other node
    assert p.allocation == (("n1", 8), ("n2", 8), ("n3", 2))
    assert pack(24, nodes).nodes == ("n1", "n2", "n4")
    assert pack(32, nodes) is None  # only three whole nodes
    p = pack(32, nodes, allow_spread=False)
    assert p is None
    p = pack(31, nodes, allow_spread=True)
    assert p is not None and p.num_gpus == 31 and p.spread is False  # 8+8+8+7 is four nodes anyway
    p = pack(20, cluster([4, 4, 4, 4, 4, 4]), allow_spread=True)
    assert p.spread and p.num_gpus == 20


def test_fewest_switches_best_fit_switch():
    nodes = cluster([0, 0, 0, 0, 0, 8])
    topo = Topology((Switch("s1", ("n0", "n1", "n2")), Switch("s2", ("n3", "n4", "n5"))))
    p = pack(16, nodes, topo)
    # s2 has 16 free GPUs and fits exactly: best-fit switch
    assert set(p.nodes) == {"n3", "n4"} and p.switches == ("s2",)
    p = pack(24, nodes, topo)
    assert p.switches == ("s1",)
    p = pack(32, nodes, topo)
    assert len(p.switches) == 2 and len(p.nodes) == 4


def test_job_shape_and_gpu_type_are_respected():
    nodes = [Node("a", 4, "a100"), Node("b", 8, "h100"), Node("c", 8, "h100")]
    assert pack(Job(1, num_gpus=4, gpu_type="h100"), nodes).nodes == ("b",)
    assert pack(Job(1, num_gpus=4, gpu_type="a100"), nodes).nodes == ("a",)
    p = pack(Job(1, num_gpus=8, gpus_per_node=4, num_nodes=2, gpu_type="h100"), nodes)
    assert p.allocation == (("b", 4), ("c", 4))
    assert pack(Job(1, num_gpus=2, gpu_type="v100"), nodes) is None
    unavailable = [Node("x", 8, available=False)]
    assert pack(1, unavailable) is None


def test_job_allocation_splits_gang_jobs():
    assert job_allocation(Job(1, num_gpus=16, nodes=("a", "b"))) == {"a": 8, "b": 8}
    assert job_allocation(Job(1, num_gpus=9, nodes=("a", "b"))) == {"a": 5, "b": 4}
    assert job_allocation(Job(1, num_gpus=8, gpus_per_node=4, nodes=("a", "b"))) == {"a": 4, "b": 4}


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=10), st.integers(1, 40))
def test_plans_respect_free_gpus_and_the_shape(used, gpus):
    nodes = cluster(used)
    p = pack(gpus, nodes)
    free = {n.name: n.gpus_free for n in nodes}
    parts = request_shape(gpus, 8).per_node
    k, r = divmod(gpus, 8)
    whole = sum(1 for f in free.values() if f == 8)
    fits = (
        whole >= k
        if r == 0
        else (whole >= k + 1 or (whole >= k and any(r <= f < 8 for f in free.values())))
    )
    assert (p is not None) == fits
    if p is None:
        return
    assert p.num_gpus == gpus and len(set(p.nodes)) == len(p.nodes) == len(parts)
    assert sorted((g for _, g in p.allocation), reverse=True) == list(parts)
    for n, g in p.allocation:
        assert g <= free[n]
    if len(parts) == 1:  # best fit: no node with fewer free GPUs that also fits
        chosen = free[p.nodes[0]]
        assert not any(gpus <= f < chosen for f in free.values())
