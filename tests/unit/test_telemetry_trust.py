"""Whose gpu-agent files count: a forged file never makes a running job look idle.

A sample is used only when it comes from ``<node>.prom`` naming that node alone, the file is
owned by root, the directory's owner or ``[telemetry] agent_user`` and writable by its owner
alone, and its node is one of the job's nodes (Slurm's). Each case below forges a file saying
job 3 (running on gpu02, whose agent is down) sits idle; the prioritizer must not warn or cancel
it, ``slurm-dl doctor`` must name the file with why and the fix, and the real agent's file
(gpu01) must still get idle job 2 warned and cancelled.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from prioritizer import Prioritizer
from slurm_dl.dlsubmit.gpu import gpu_status
from slurm_dl.cli.doctor_cmd import _telemetry as gather_telemetry
from slurm_dl.core.config import TelemetryConfig
from slurm_dl.core.doctor import Facts, diagnose
from slurm_dl.core.model import Job, JobState
from slurm_dl.telemetry import exposition
from slurm_dl.telemetry.agent import write_atomically
from slurm_dl.telemetry.reader import read_exposition_dir, scan_exposition_dir
from slurm_dl.telemetry.samples import JobGpuSample

from test_telemetry_prioritizer import agent_writes, scene  # the prioritizer scene (same directory)

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
STRANGER = 54321  # a uid that is neither root nor the directory's owner


def agent_dir(tmp_path: Path) -> Path:
    """The exposition directory as an admin makes it (0755, whatever the umask), with gpu01's
    real agent file in it."""
    agents = tmp_path / "agents"
    agents.mkdir()
    agents.chmod(0o755)
    agent_writes(agents, 1000.0)
    return agents


def idle_rows(node: str, at: float, job: int = 3) -> str:
    return exposition.render([JobGpuSample(job, node, g, 0.0, 0, 50.0, 0, at) for g in (0, 1)])


def forge(agents: Path, how: str, at: float) -> Path:
    """One forged file claiming job 3's two GPUs idle at ``at``."""
    if how == "node the job is not on":
        path = agents / "gpu99.prom"
        path.write_text(idle_rows("gpu99", at))
    elif how == "name not its node":
        path = agents / "gpu99.prom"
        path.write_text(idle_rows("gpu02", at))
    elif how == "extra node in a real file name":
        path = agents / "gpu02.prom"
        path.write_text(idle_rows("gpu02", at) + idle_rows("gpu07", at))
    elif how in ("group-writable", "world-writable"):
        path = agents / "gpu02.prom"
        path.write_text(idle_rows("gpu02", at))
        path.chmod(0o664 if how == "group-writable" else 0o646)
    elif how == "another user's":
        path = agents / "gpu02.prom"
        path.write_text(idle_rows("gpu02", at))
        os.chown(path, STRANGER, -1)
    elif how == "a link":
        real = agents.parent / "elsewhere.prom"
        real.write_text(idle_rows("gpu02", at))
        real.chmod(0o644)
        path = agents / "gpu02.prom"
        path.unlink(missing_ok=True)
        path.symlink_to(real)
    else:
        raise AssertionError(how)
    if how not in ("group-writable", "world-writable", "a link"):
        path.chmod(
            0o644
        )  # as the agent writes, whatever the umask: only the case's own fault remains
    return path


CASES = [
    "node the job is not on",
    "name not its node",
    "extra node in a real file name",
    "group-writable",
    "world-writable",
    pytest.param("another user's", marks=AS_ROOT),
    "a link",
]


@pytest.mark.parametrize("how", CASES)
def test_a_forged_file_does_not_make_a_running_job_look_idle(tmp_path: Path, how: str) -> None:
    config, c, store = scene(tmp_path)
    c.add(3, 2, running_on="gpu02")
    p = Prioritizer(config, c, store)
    agents = tmp_path / "agents"
    for _ in range(20):  # limit 10 min + grace 5 min: job 2 (really idle) is cancelled by now
        agent_writes(agents, c.now)  # the real agent of gpu01
        forge(agents, how, c.now)
        p.run_cycle()
        c.now += 60
    assert c.cancelled == [2], "the real agent's file still works"
    assert 3 in c.jobs and not any(d.kind.startswith("idle") for d in store.decisions(3)), how
    assert "gpu_utilisation" not in (store.explanation(3) or {}), "no sample of job 3 was used"


@pytest.mark.parametrize("how", [c for c in CASES if c != "node the job is not on"])
def test_doctor_names_each_ignored_file_with_why_and_the_fix(tmp_path: Path, how) -> None:
    agents = agent_dir(tmp_path)
    path = forge(agents, how, 1000.0)
    f = Facts(config_path="site.toml")
    gather_telemetry(f, TelemetryConfig(exposition_dir=str(agents)))
    [bad] = [x for x in diagnose(f) if x.check == "gpu-agent files" and x.status != "ok"]
    assert bad.status == "fail" and bad.detail.startswith(f"{path}: ") and "ignored" in bad.detail
    assert str(path) in bad.fix
    want = {
        "name not its node": "holds samples of gpu02, not only of gpu99",
        "extra node in a real file name": "holds samples of gpu07, not only of gpu02",
        "group-writable": "writable by its group (mode 0664)",
        "world-writable": "writable by every user (mode 0646)",
        "another user's": f"owned by uid {STRANGER}, not by root",
        "a link": "a symbolic link",
    }[how]
    assert want in bad.detail, bad.detail
    if "writable" in how:
        assert f"chmod go-w {path}" in bad.fix
    assert f.telemetry_read == 1, "gpu01's own file is still read"


def test_doctor_passes_the_agents_own_files_and_warns_of_a_directory_others_can_write(
    tmp_path: Path,
) -> None:
    agents = agent_dir(tmp_path)
    f = Facts(config_path="site.toml")
    gather_telemetry(f, TelemetryConfig(exposition_dir=str(agents)))
    [ok] = [x for x in diagnose(f) if x.check == "gpu-agent files"]
    assert ok.status == "ok" and "1 file(s)" in ok.detail and "root" in ok.detail
    agents.chmod(0o777)
    f = Facts(config_path="site.toml")
    gather_telemetry(f, TelemetryConfig(exposition_dir=str(agents)))
    [warn] = [x for x in diagnose(f) if x.check == "gpu-agent files"]
    assert (
        warn.status == "warn"
        and "without the sticky bit" in warn.detail
        and "chmod go-w" in warn.fix
    )
    f = Facts(config_path="site.toml")
    gather_telemetry(f, TelemetryConfig(exposition_dir=str(tmp_path / "missing")))
    [gone] = [x for x in diagnose(f) if x.check == "gpu-agent files"]
    assert gone.status == "warn" and "does not exist" in gone.detail
    assert all(
        x.check != "gpu-agent files"
        for x in diagnose(Facts(config_path="site.toml"))
        if x.status != "skip"
    )


@AS_ROOT
def test_the_agent_user_and_the_directorys_owner_are_trusted(tmp_path: Path) -> None:
    agents = agent_dir(tmp_path)
    os.chown(agents / "gpu01.prom", STRANGER, -1)
    assert not read_exposition_dir(agents)
    os.chown(agents, STRANGER, -1)  # the agents write as the directory's owner
    assert {s.node for s in read_exposition_dir(agents)} == {"gpu01"}


def test_the_agent_user_names_the_agents_own_user(tmp_path: Path) -> None:
    import pwd

    me = pwd.getpwuid(os.geteuid()).pw_name
    scan = scan_exposition_dir(tmp_path, agent_user=me)
    assert me in scan.trusted and not scan.problems
    scan = scan_exposition_dir(tmp_path, agent_user="no-such-user-here")
    assert scan.problems == [
        "[telemetry] agent_user 'no-such-user-here' is not a user on this host"
    ]


def test_a_pipe_named_like_an_agents_file_neither_blocks_nor_counts(tmp_path: Path) -> None:
    agents = agent_dir(tmp_path)
    os.mkfifo(agents / "gpu02.prom")
    scan = scan_exposition_dir(agents)
    assert [i.why for i in scan.ignored] == ["not a plain file"] and {
        s.node for s in scan.samples
    } == {"gpu01"}


def test_dlsubmit_status_uses_only_samples_of_the_jobs_own_nodes() -> None:
    job = Job(job_id=3, state=JobState.RUNNING, nodes=("gpu02",), num_gpus=2)
    forged = [JobGpuSample(3, "gpu99", g, 0.0, 0, None, 0, 1000.0, idle_since=0.0) for g in (0, 1)]
    real = [JobGpuSample(3, "gpu02", g, 80.0, 1 << 30, None, 1, 990.0) for g in (0, 1)]
    assert gpu_status(job, forged) is None
    g = gpu_status(job, forged + real)
    assert g["mean_util_percent"] == 80.0 and g["idle_minutes"] is None


def test_the_agents_own_written_file_is_trusted(tmp_path: Path) -> None:
    """What the agent writes (0644, its own user) passes the rule; its previous file is read back."""
    agents = tmp_path / "agents"
    write_atomically(agents / "gpu02.prom", idle_rows("gpu02", 1000.0))
    assert stat.S_IMODE((agents / "gpu02.prom").stat().st_mode) == 0o644
    scan = scan_exposition_dir(agents)
    assert scan.ignored == [] and len(scan.samples) == 2
