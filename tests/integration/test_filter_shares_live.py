"""GPU sharing through the live filter, as user nobody: a testbed whose first node offers 8
shards per GPU (`--shard-nodes 1 --shards-per-gpu 8`), the filter with `[sharing]` on the h100
group. Eight 1-GPU inference jobs become shards and run at once on the shard node, a 4-GPU
training job keeps whole GPUs, a training job that asks for a shard is refused with the reason."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from slurm_dl.testbed import Testbed, job_fields, submit, wait_for_job_state

from test_filter import CONFIG, FilterProcess, install_filter, require_testbed_support
from users import as_user

SHARING = '\n[sharing]\nclasses = ["inference", "interactive"]\n\n[[sharing.groups]]\nnode_group = "h100"\nshards_per_gpu = 8\n'


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    require_testbed_support()
    root = tmp_path_factory.mktemp("shares")
    config = root / "site.toml"
    config.write_text(CONFIG.read_text() + SHARING)
    tb = Testbed(
        root / "tb",
        nodes=4,
        gpus_per_node=8,
        gpu_type="h100",
        shard_nodes=1,
        shards_per_gpu=8,
        slurm=os.environ.get("SLURM_DL_TEST_SLURM") or None,
    )
    service = FilterProcess(root / "filter.sock", root / "filter.log", tb.env(), config=config)
    try:
        tb.up()
        service.start()
        install_filter(tb, service.sock, config)
        yield tb
    finally:
        service.stop()
        tb.down()


def test_eight_small_jobs_share_one_node_while_training_keeps_whole_gpus(
    shared: Testbed, tmp_path: Path
) -> None:
    gate = tmp_path / "go"
    script = f"#!/bin/bash\nwhile [ ! -e {gate} ]; do sleep 0.2; done\n"
    ids = [
        submit(
            script,
            shared.env(),
            ["--gpus=1", "-t", "10", "--comment=dl:class=inference", "--output=/dev/null"],
        )
        for _ in range(8)
    ]
    ids.append(submit(script, shared.env(), ["--gpus=4", "-t", "10", "--output=/dev/null"]))
    try:
        for j in ids:  # all at once: none can end before the gate opens
            wait_for_job_state(j, shared.env(), ("RUNNING",), timeout=120)
        small = [job_fields(j, shared.env()) for j in ids[:8]]
        assert {f["NodeList"] for f in small} == {"gpu01"}
        assert all(f["TresPerNode"].endswith("shard:1") for f in small)
        assert job_fields(ids[8], shared.env())["TresPerNode"].endswith("gpu:4")
    finally:
        gate.touch()
    for j in ids:
        wait_for_job_state(j, shared.env(), ("COMPLETED",), timeout=120)


def test_a_user_is_told_of_the_shard_and_a_training_job_cannot_ask_for_one(shared: Testbed) -> None:
    as_nobody, public = as_user(shared)  # (--hold: the testbed's spool is private to root)
    try:
        out = as_nobody(
            "sbatch",
            "--parsable",
            "--hold",
            "--chdir=/tmp",
            "-o",
            "/dev/null",
            "--gpus=1",
            "-t",
            "10",
            "--comment=dl:class=inference",
            "--wrap",
            "true",
        )
        assert out.returncode == 0, out.stderr
        assert "runs on a GPU shard" in out.stderr and "dl:share=0" in out.stderr
        job = int(out.stdout.strip().split(";")[0])
        assert job_fields(job, shared.env())["TresPerNode"].endswith("shard:1")
        refused = as_nobody(
            "sbatch",
            "--parsable",
            "--hold",
            "--chdir=/tmp",
            "-o",
            "/dev/null",
            "--gres=shard:1",
            "-t",
            "10",
            "--wrap",
            "true",
        )
        assert (
            refused.returncode != 0 and "training job cannot run on a GPU shard" in refused.stderr
        )
    finally:
        shutil.rmtree(public, ignore_errors=True)


def test_shards_count_as_gpus_against_the_caps_and_a_gpus_worth_of_them_is_refused(
    shared: Testbed,
) -> None:
    """As user nobody: a shard job is tagged as the GPU it counts as; a whole GPU's shards or
    more, or an impossible GPU memory need, is refused with the fix; interactive shard jobs
    stop at the class's 4-GPU quota (testbed.toml) instead of holding 12 GPUs."""
    as_nobody, public = as_user(shared)
    held: list[int] = []

    def sbatch(*opts: str):
        out = as_nobody(
            "sbatch",
            "--parsable",
            "--hold",
            "--chdir=/tmp",
            "-o",
            "/dev/null",
            "-t",
            "10",
            *opts,
            "--wrap",
            "true",
        )
        if out.returncode == 0:
            held.append(int(out.stdout.strip().split(";")[0]))
        return out

    try:
        for k, words in (
            (8, "all the shards of one GPU"),
            (32, "more shards than one GPU's 8"),
            (99999, "more shards than one GPU's 8"),
        ):
            out = sbatch(f"--gres=shard:{k}", "--comment=dl:class=inference")
            assert (
                out.returncode != 0 and words in out.stderr and f"--gpus={-(-k // 8)}" in out.stderr
            ), out.stderr
        out = sbatch("--gpus=1", "--comment=dl:class=inference;gpu_mem=500G")
        assert out.returncode != 0 and "needs more memory than any GPU here has" in out.stderr, (
            out.stderr
        )
        out = sbatch("--gres=shard:2", "--comment=dl:class=inference")
        assert out.returncode == 0, out.stderr
        assert ";gpus=1;" in job_fields(held[-1], shared.env())["AdminComment"]
        for _ in range(4):  # four GPUs' worth of interactive shards: the quota
            out = sbatch("--gres=shard:7", "--comment=dl:class=interactive")
            assert out.returncode == 0, out.stderr
        out = sbatch("--gres=shard:1", "--comment=dl:class=interactive")
        assert (
            out.returncode != 0 and "allows 4 GPU(s) per user at once; you hold 4" in out.stderr
        ), out.stderr
    finally:
        if held:
            subprocess.run(["scancel", *map(str, held)], env=shared.env(), check=False)
        shutil.rmtree(public, ignore_errors=True)
