"""Slurm's own GPU index assignment, read from the live testbed, drives the agent's attribution.

The waiting loop's bound only turns a broken cluster into a failure; nothing asserts on time.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from slurm_dl.slurm import CliBackend
from slurm_dl.slurm.node_alloc import NodeAllocations
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
            pytest.fail(
                f"jobs {sorted(job_ids)} never showed GPU indices on {want_nodes} node(s): {allocs}"
            )
        time.sleep(0.2)


def test_gpu_indices_of_running_jobs_attribute_samples(testbed: Testbed) -> None:
    backend = CliBackend(testbed.env())
    single = backend.submit(SLEEPER, ["--gres=gpu:h100:3", "-t", "10", "-J", "telemetry-single"])
    multi = backend.submit(
        SLEEPER, ["-N2", "--gpus-per-node=2", "-t", "10", "-J", "telemetry-multi"]
    )
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
        samples = [
            GpuSample(node, i, i, 50.0, 1 << 30, 80 << 30, 300.0, (100 + i,), 1.0)
            for node in {a.node for a in allocs}
            for i in range(8)
        ]
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


def _sdiag_counts(env: dict) -> dict[str, int]:
    text = subprocess.run(
        ["sdiag"], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    by_type = text.split("statistics by message type", 1)[-1].split("statistics by user", 1)[0]
    return {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^\s+(\S+)\s+\(\s*\d+\)\s+count:(\d+)", by_type, re.M)
    }


def test_the_agent_reads_its_node_without_the_whole_queue(testbed: Testbed) -> None:
    """Per node, the agent's local reads (listpids, one read per new job) give what the full
    queue read gives, and once the node's jobs are known a sample sends slurmctld no job read at
    all; an allocation with no process on the node (salloc without a step) is still found."""
    env = testbed.env()
    backend = CliBackend(env)
    jobs = [
        backend.submit(SLEEPER, ["--gres=gpu:h100:3", "-t", "10", "-J", "local-single"]),
        # a step on both nodes: the batch script alone runs on the first node only
        backend.submit(
            "#!/bin/bash\nsrun sleep 300\n",
            ["-N2", "--gpus-per-node=2", "-t", "10", "-J", "local-multi"],
        ),
        backend.submit(SLEEPER, ["--array=0-2", "--gres=gpu:1", "-t", "10", "-J", "local-array"]),
    ]
    held: list[int] = []
    try:
        allocs = _allocs_for(backend, set(jobs) | set(range(jobs[-1], jobs[-1] + 3)), want_nodes=6)
        nodes = sorted({a.node for a in allocs})
        readers = {n: NodeAllocations(backend.gpu_allocations, env) for n in nodes}

        def settled(node: str) -> bool:  # every job there has its processes up: no fallback
            before = readers[node].full_reads
            got = sorted(readers[node](node), key=lambda a: (a.job_id, a.gpus))
            return readers[node].full_reads == before and got == sorted(
                backend.gpu_allocations(node), key=lambda a: (a.job_id, a.gpus)
            )

        for node in nodes:
            end = time.monotonic() + 90
            while not settled(node):
                if time.monotonic() > end:
                    pytest.fail(
                        f"{node}: the local read never matched the queue's: {readers[node](node)}"
                    )
                time.sleep(0.3)
        subprocess.run(["sdiag", "-r"], env=env, check=True, capture_output=True, timeout=60)
        again = {n: readers[n](n) for n in nodes}
        counts = _sdiag_counts(env)
        assert counts.get("REQUEST_JOB_INFO", 0) == 0, counts
        assert counts.get("REQUEST_JOB_INFO_SINGLE", 0) == 0, (
            counts
        )  # known jobs are not read again
        assert sorted(a.job_id for v in again.values() for a in v) == sorted(
            a.job_id for a in allocs
        )

        # an allocation without a process on its node: found through the fallback
        try:
            out = subprocess.run(
                ["salloc", "--no-shell", "--gres=gpu:1", "-t", "5", "-w", nodes[0]],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
        except subprocess.TimeoutExpired:
            queue = subprocess.run(
                ["squeue", "-o", "%i %T %r %N %b"], env=env, capture_output=True, text=True
            ).stdout
            pytest.fail(f"salloc on {nodes[0]} did not start:\n{queue}")
        held.append(int(re.search(r"Granted job allocation (\d+)", out.stderr).group(1)))
        reader = readers[nodes[0]]

        reader.grace_s = 0.0  # the agent waits 2 minutes for a job's processes; here at once

        def found() -> bool:
            return held[0] in {a.job_id for a in reader(nodes[0])}

        assert found() and reader.full_reads == 1 and reader.quiet == {held[0]}
        # found once through the queue; then read alone: no further queue read
        subprocess.run(["sdiag", "-r"], env=env, check=True, capture_output=True, timeout=60)
        assert found()
        assert _sdiag_counts(env).get("REQUEST_JOB_INFO", 0) == 0 and reader.full_reads == 1
    finally:
        for job_id in [*jobs, *held]:
            try:
                backend.cancel(job_id)
            except Exception:  # already gone
                pass
