"""Slurm's own GPU index assignment, read from the live testbed, drives the agent's attribution.

The waiting loop's bound only turns a broken cluster into a failure; nothing asserts on time.
"""

from __future__ import annotations

import time

import pytest

from slurm_dl.slurm import CliBackend
from slurm_dl.telemetry.attribution import attribute, summarize
from slurm_dl.telemetry.samples import GpuSample
from slurm_dl.testbed import Testbed

pytestmark = pytest.mark.integration
SLEEPER = "#!/bin/bash\nsleep 300\n"


def _allocs_for(backend: CliBackend, job_ids: set[int], want_nodes: int, bound_s: float = 90.0):
    end = time.monotonic() + bound_s
    while True:
        allocs = [a for a in backend.gpu_allocations() if a.job_id in job_ids]
        if len(allocs) >= want_nodes:
            return allocs
        if time.monotonic() > end:
            pytest.fail(f"jobs {sorted(job_ids)} never showed GPU indices on {want_nodes} node(s): {allocs}")
        time.sleep(0.2)


def test_gpu_indices_of_running_jobs_attribute_samples(testbed: Testbed) -> None:
    backend = CliBackend(testbed.env())
    single = backend.submit(SLEEPER, ["--gres=gpu:h100:3", "-t", "10", "-J", "telemetry-single"])
    multi = backend.submit(SLEEPER, ["-N2", "--gpus-per-node=2", "-t", "10", "-J", "telemetry-multi"])
    try:
        allocs = _allocs_for(backend, {single, multi}, want_nodes=3)
        by_job: dict[int, list] = {}
        for a in allocs:
            by_job.setdefault(a.job_id, []).append(a)
        assert [len(a.gpus) for a in by_job[single]] == [3]
        assert sorted(len(a.gpus) for a in by_job[multi]) == [2, 2]
        assert len({a.node for a in by_job[multi]}) == 2
        per_node: dict[str, list[int]] = {}
        for a in backend.gpu_allocations():  # nobody shares a GPU index on a node
            per_node.setdefault(a.node, []).extend(a.gpus)
        assert all(len(v) == len(set(v)) and all(0 <= i < 8 for i in v) for v in per_node.values())
        # the agent of each node sees all 8 GPUs; Slurm's indices decide whose they are
        samples = [GpuSample(node, i, i, 50.0, 1 << 30, 80 << 30, 300.0, (100 + i,), 1.0)
                   for node in {a.node for a in allocs} for i in range(8)]
        jobs = summarize(attribute(samples, backend.gpu_allocations()))
        assert jobs[single].gpus == 3 and jobs[multi].gpus == 4
        only = backend.gpu_allocations(node=by_job[single][0].node)
        assert {a.node for a in only} == {by_job[single][0].node}
    finally:
        for job_id in (single, multi):
            try:
                backend.cancel(job_id)
            except Exception:  # already gone
                pass
