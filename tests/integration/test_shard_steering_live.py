"""The prioritizer packs waiting shard jobs onto GPUs already shared, on a REAL Slurm: two 4-GPU
nodes offer 8 shards per GPU; GPU 0 of gpu02 has 3 shards in use. A 2-shard job waits (CPU hogs
fill both nodes, and gpu01 frees first). Left to Slurm, it opens a GPU of gpu01; after one
prioritizer cycle pins it to gpu02 (``ReqNodeList``) it waits for gpu02 and joins its GPU 0.
About 15-30 s."""

from __future__ import annotations

from pathlib import Path

import pytest

from polling import wait_until
from prioritizer import Prioritizer
from slurm_dl.cli.config_file import load_config
from slurm_dl.slurm import CliBackend
from slurm_dl.store import Store
from slurm_dl.testbed import job_fields, submit, wait_for_job_state

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SLEEP = "#!/bin/bash\nsleep 300\n"


def site_config(tmp_path: Path) -> Path:
    """The testbed's config with the two shard nodes as a sharing group of their own."""
    text = (ROOT / "site-configs" / "testbed.toml").read_text()
    group = 'name = "h100"\nnodes = "gpu[01-04]"\ngpus_per_node = 8\n'
    assert group in text, "the testbed config changed: update this test's node groups"
    text = text.replace(
        group,
        'name = "shared"\nnodes = "gpu[01-02]"\ngpus_per_node = 4\ngpu_type = "h100"\n'
        'cpus = 32\nmemory_gb = 250\npartitions = ["gpu"]\n\n[[node_groups]]\n'
        'name = "h100"\nnodes = "gpu03"\ngpus_per_node = 4\n',
    )
    text += '\n[sharing]\n[[sharing.groups]]\nnode_group = "shared"\nshards_per_gpu = 8\n'
    path = tmp_path / "site.toml"
    path.write_text(text)
    return path


def test_a_waiting_shard_job_joins_the_shared_gpu_instead_of_opening_one(
    make_testbed, tmp_path: Path
) -> None:
    tb = make_testbed(nodes=3, gpus_per_node=4, shard_nodes=2, shards_per_gpu=8)
    tb.up()
    env = tb.env()
    backend = CliBackend(env)
    config = load_config(site_config(tmp_path))
    ids: list[int] = []
    try:
        shared = submit(SLEEP, env, ["--gres=shard:3", "-w", "gpu02", "-c", "1", "-o", "/dev/null"])
        ids.append(shared)
        wait_for_job_state(shared, env, ("RUNNING",), timeout=60)

        def waiting_shard_job() -> tuple[int, list[int]]:
            """CPU hogs fill both shard nodes; a 2-shard job then waits for resources."""
            hogs = [
                submit(SLEEP, env, ["-w", node, "-c", str(cpus), "--mem=1000", "-o", "/dev/null"])
                for node, cpus in (("gpu01", 32), ("gpu02", 31))
            ]
            ids.extend(hogs)
            for h in hogs:
                wait_for_job_state(h, env, ("RUNNING",), timeout=60)
            job = submit(SLEEP, env, ["--gres=shard:2", "-c", "1", "-o", "/dev/null"])
            ids.append(job)
            wait_until(
                "the shard job waiting for resources",
                lambda: job_fields(job, env).get("Reason") == "Resources",
                60,
            )
            return job, hogs

        def free(hog: int) -> None:
            backend.cancel(hog)
            wait_for_job_state(hog, env, ("CANCELLED",), timeout=60)

        # Left to Slurm: gpu01 frees first and the job opens a GPU there, gpu02's shared GPU unused.
        alone, hogs = waiting_shard_job()
        free(hogs[0])
        wait_for_job_state(alone, env, ("RUNNING",), timeout=60)
        assert {a.job_id: a for a in backend.gpu_allocations()}[alone].node == "gpu01"
        free(hogs[1])
        backend.cancel(alone)
        wait_for_job_state(alone, env, ("CANCELLED", "COMPLETED"), timeout=60)

        # Steered: one prioritizer cycle while it waits pins it to gpu02, and it joins GPU 0 there.
        small, hogs = waiting_shard_job()
        store = Store(f"sqlite:///{tmp_path / 'prio.db'}")
        Prioritizer(config, backend, store).run_cycle()
        [steered] = [d for d in store.decisions(small) if d.kind == "shard_node"]
        assert steered.reason.startswith(
            "steered to gpu02: joins GPU 0 of gpu02, already shared (3 of 8"
        ), steered
        assert job_fields(small, env)["ReqNodeList"] == "gpu02"
        free(hogs[0])
        probe = submit("#!/bin/bash\ntrue\n", env, ["-w", "gpu01", "-c", "1", "-o", "/dev/null"])
        ids.append(probe)  # a job that ran on gpu01 after it freed: Slurm has scheduled since
        wait_for_job_state(probe, env, ("COMPLETED",), timeout=60)
        assert job_fields(small, env)["JobState"] == "PENDING", "pinned: it waits for gpu02"
        free(hogs[1])
        wait_for_job_state(small, env, ("RUNNING",), timeout=60)
        mine = {a.job_id: a for a in backend.gpu_allocations()}
        assert (mine[small].node, mine[small].gpus, mine[small].shards) == (
            "gpu02",
            mine[shared].gpus,
            2,
        )
    finally:
        for j in ids:
            try:
                backend.cancel(j)
            except Exception:  # noqa: BLE001 - ended already
                pass
