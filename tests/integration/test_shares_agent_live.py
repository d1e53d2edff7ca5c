"""The GPU agent on shared GPUs, live, as user nobody: a testbed whose first node offers 8 shards
per GPU, the filter with ``[sharing]`` (a shard guarantees 10 GiB). Two ``dlsubmit infer --share``
jobs of nobody land on shards of the same GPU; the agent (``slurm-dl gpu-agent --replay``:
readings that name the jobs' real process ids, as NVML would on a GPU node) splits the GPU by
process, and the job using 15 GiB of its 10 GiB share is named in the agent's file, in nobody's
``dlsubmit status`` and in ``slurm-dl explain``; its 4 GiB neighbour is not. A job that asks
``--gpu-mem 25G`` gets 3 shards and is told so. About 20-30 s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from polling import wait_until
from prioritizer import Prioritizer
from slurm_dl.cli.config_file import load_config
from slurm_dl.slurm import CliBackend
from slurm_dl.store import Store
from slurm_dl.testbed import Testbed, job_fields, wait_for_job_state

from test_filter import CONFIG, FilterProcess, install_filter, require_testbed_support
from users import as_user, user_python

pytestmark = pytest.mark.integration
GIB = 1 << 30
CLI = [sys.executable, "-m", "slurm_dl.cli.main"]


@pytest.fixture(scope="module")
def scene() -> Iterator[tuple[Testbed, Path]]:
    require_testbed_support()
    if os.environ.get("SLURM_DL_TEST_SLURM"):
        pytest.skip(
            "another release's clients run inside its Debian root; nobody's jobs run on the host's Slurm"
        )
    # Not pytest's root-only temp dir: nobody's jobs must reach the testbed's spool to run.
    root = Path(tempfile.mkdtemp(prefix="slurm-dl-shares-"))
    root.chmod(0o755)
    (root / "agents").mkdir(mode=0o755)
    config = root / "site.toml"
    config.write_text(
        CONFIG.read_text() + f'\n[telemetry]\nexposition_dir = "{root / "agents"}"\n'
        '\n[sharing]\nclasses = ["inference", "interactive"]\n\n[[sharing.groups]]\n'
        'node_group = "h100"\nshards_per_gpu = 8\nshard_memory_gb = 10\n'
    )
    config.chmod(0o644)
    tb = Testbed(
        root / "tb", nodes=2, gpus_per_node=4, gpu_type="h100", shard_nodes=1, shards_per_gpu=8
    )
    service = FilterProcess(root / "filter.sock", root / "filter.log", tb.env(), config=config)
    try:
        tb.up()
        service.start()
        install_filter(tb, service.sock, config)
        yield tb, root
    finally:
        service.stop()
        tb.down()
        shutil.rmtree(root, ignore_errors=True)


def test_the_job_over_its_share_is_named_to_its_user(scene: tuple[Testbed, Path]) -> None:
    tb, root = scene
    config = root / "site.toml"
    run, public = as_user(tb)
    bin_dir = user_python()
    work = root / "work"
    work.mkdir(mode=0o755)
    shutil.chown(work, "nobody")
    user_env = [
        "env",
        f"PATH={bin_dir}:/usr/bin:/bin",
        f"SLURM_DL_CONFIG={config}",
        f"HOME={work}",
        "COLUMNS=80",
    ]

    def as_nobody(*argv: str) -> subprocess.CompletedProcess:
        return run("bash", "-c", f'cd {work} && exec "$@"', "-", *user_env, *argv)

    items = work / "items.txt"
    items.write_text("one\n")
    items.chmod(0o644)
    jobs: dict[str, int] = {}
    extra: list[int] = []
    try:
        for name in ("big", "small"):  # each writes its process id where the test reads it
            out = as_nobody(
                "dlsubmit",
                "infer",
                "--share",
                "--gpus",
                "1",
                "--time",
                "5",
                "--name",
                name,
                "--inputs",
                str(items),
                "--",
                "bash",
                "-c",
                f"echo $$ > {work}/{name}.pid; exec sleep 300",
            )
            assert out.returncode == 0, out.stderr
            assert "runs on a GPU shard" in out.stderr and "dl:share=0" in out.stderr, (
                out.stderr
            )  # the filter's word
            jobs[name] = int(re.search(r"submitted infer job (\d+)", out.stdout).group(1))
        # Asking by memory: 25G needs 3 shards of 10 GB; the user is told so, and the tag keeps the share.
        out = as_nobody(
            "dlsubmit",
            "infer",
            "--gpu-mem",
            "25G",
            "--time",
            "5",
            "--name",
            "mem",
            "--inputs",
            str(items),
            "--",
            "sleep",
            "300",
        )
        assert out.returncode == 0, out.stderr
        mem_job = int(re.search(r"submitted infer job (\d+)", out.stdout).group(1))
        extra.append(mem_job)
        assert (
            "runs on 3 GPU shard(s) (3 of 8 parts of a h100, 30 GB of its memory for the 25G it"
            in " ".join(out.stderr.split())
        ), out.stderr
        fields = job_fields(mem_job, tb.env())
        assert (
            fields["TresPerNode"].endswith("shard:3")
            and "gpus=1;" in fields["AdminComment"]
            and "shards=3:8" in fields["AdminComment"]
        ), fields
        for j in jobs.values():
            wait_for_job_state(j, tb.env(), ("RUNNING",), timeout=120)
            assert job_fields(j, tb.env())["TresPerNode"].endswith("shard:1")
        allocs = {a.job_id: a for a in CliBackend(tb.env()).gpu_allocations()}
        assert allocs[jobs["big"]].shards == 1 and allocs[jobs["small"]].shards == 1
        [(node, gpu)] = {
            (allocs[j].node, allocs[j].gpus[0]) for j in jobs.values()
        }  # one GPU, shared
        pids = {
            n: int(wait_until(f"{n}'s process id", lambda n=n: _read(work / f"{n}.pid"), 60))
            for n in jobs
        }
        readings = root / "readings.json"  # what NVML reports on a GPU node running these processes
        readings.write_text(
            json.dumps(
                [
                    {
                        "minor": gpu,
                        "util": 70,
                        "mem_total": 80 * GIB,
                        "processes": [
                            {"pid": pids["big"], "mem": 15 * GIB, "sm_util": 50},
                            {"pid": pids["small"], "mem": 4 * GIB, "sm_util": 20},
                        ],
                    }
                ]
            )
        )
        agent = subprocess.run(
            [
                *CLI,
                "gpu-agent",
                "--once",
                "--replay",
                str(readings),
                "--node",
                node,
                "--output-dir",
                str(root / "agents"),
                "--config",
                str(config),
            ],
            env={**os.environ, **tb.env()},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert agent.returncode == 0, agent.stderr
        assert f"job {jobs['big']}: 1 GPU(s) 50% OVER its share's memory" in agent.stdout, (
            agent.stdout
        )
        assert re.search(rf"job {jobs['small']}: 1 GPU\(s\) 20%(,|$)", agent.stdout.rstrip()), (
            agent.stdout
        )
        prom = (root / "agents" / f"{node}.prom").read_text()
        assert (
            f'slurm_dl_gpu_share_bytes{{job="{jobs["big"]}",node="{node}",gpu="{gpu}"}} {10 * GIB}'
            in prom
        )

        status = as_nobody("dlsubmit", "status")
        assert status.returncode == 0, status.stderr
        lines = status.stdout.splitlines()
        big = lines.index(next(ln for ln in lines if ln.split()[:2] == [str(jobs["big"]), "big"]))
        small = lines.index(
            next(ln for ln in lines if ln.split()[:2] == [str(jobs["small"]), "small"])
        )
        assert (
            "GPU use: OVER its share: 15.0 GiB of its 10.0 GiB share, 50% of a GPU"
            in lines[big + 1]
        ), status.stdout
        assert "GPU use: 20% of a GPU, 4.0 GiB of its 10.0 GiB share" in lines[small + 1], (
            status.stdout
        )
        assert all(len(ln) <= 80 for ln in lines), status.stdout
        detail = as_nobody("dlsubmit", "status", str(jobs["big"]))
        assert "neighbours on its GPU may run out of memory" in detail.stdout, detail.stdout

        # The prioritizer's cycle reads the same file; explain names the job over its share.
        store = Store(f"sqlite:///{root / 'prio.db'}")
        Prioritizer(load_config(config), CliBackend(tb.env()), store).run_cycle()
        explain = subprocess.run(
            [
                *CLI,
                "explain",
                str(jobs["big"]),
                "--config",
                str(config),
                "--db",
                store.url,
                "--no-live",
            ],
            env={**os.environ, **tb.env()},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert explain.returncode == 0, explain.stderr
        assert "15.0 GiB used of the 10.0 GiB its shards guarantee" in explain.stdout, (
            explain.stdout
        )
        assert "OVER its share" in explain.stdout, explain.stdout
    finally:
        if jobs or extra:
            subprocess.run(
                ["scancel", *map(str, jobs.values()), *map(str, extra)],
                env={**os.environ, **tb.env()},
                capture_output=True,
            )
        shutil.rmtree(public, ignore_errors=True)
        shutil.rmtree(bin_dir.parent.parent, ignore_errors=True)


def _read(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None
