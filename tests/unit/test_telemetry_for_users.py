"""Users read the gpu-agents' files too (``dlsubmit status``): a telemetry directory they
cannot reach is named by ``slurm-dl doctor`` with the fix, and status says "not available"
instead of failing or passing the job off as unsampled. The shipped examples put the directory
where users can reach it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from slurm_dl.cli.doctor_cmd import _telemetry as gather_telemetry
from slurm_dl.core.config import TelemetryConfig
from slurm_dl.core.database_url import STATE_DIR
from slurm_dl.core.doctor import Facts, closed_to_users, diagnose
from slurm_dl.core.model import Job, JobState
from slurm_dl.dlsubmit.cli import _gpu_samples
from slurm_dl.dlsubmit.gpu import gpu_cell
from slurm_dl.dlsubmit.status import describe_jobs, print_status

ROOT = Path(__file__).resolve().parents[2]
GUIDE = [("/", 0o755), ("/var", 0o755), ("/var/lib", 0o755), ("/var/lib/slurm-dl", 0o750)]
CHECK = "telemetry for users"


def test_the_first_directory_that_keeps_users_out_is_named() -> None:
    inside = [*GUIDE, ("/var/lib/slurm-dl/telemetry", 0o755)]
    assert closed_to_users(inside, "/var/lib/slurm-dl/telemetry") == ("/var/lib/slurm-dl", 0o750)
    passable = [("/", 0o755), ("/srv", 0o711), ("/srv/t", 0o755)]
    assert closed_to_users(passable, "/srv/t/") is None  # passing through needs o+x only
    unlisted = [("/", 0o755), ("/srv", 0o755), ("/srv/t", 0o711)]
    assert closed_to_users(unlisted, "/srv/t") == ("/srv/t", 0o711)  # the files: o+rx
    assert closed_to_users([], "/srv/t") is None  # nothing looked at: nothing to say


def _finding(modes: list[tuple[str, int]], where: str):
    f = Facts(config_path="site.toml", telemetry_dir=where, telemetry_path_modes=modes)
    return [x for x in diagnose(f) if x.check == CHECK]


def test_doctor_says_which_directory_and_how_to_fix_it() -> None:
    where = f"{STATE_DIR}/telemetry"
    [warn] = _finding([*GUIDE, (where, 0o755)], where)
    assert warn.status == "warn" and "/var/lib/slurm-dl is mode 0750" in warn.detail, warn
    assert "dlsubmit status" in warn.detail and "exposition_dir" in warn.fix, warn
    assert f"not inside {STATE_DIR}" in warn.fix and "chmod o+x /var/lib/slurm-dl" in warn.fix
    [own] = _finding([("/", 0o755), ("/srv", 0o755), ("/srv/t", 0o700)], "/srv/t")
    assert own.fix == "chmod o+rx /srv/t" and "/srv/t is mode 0700" in own.detail
    assert _finding([("/", 0o755), ("/srv", 0o755), ("/srv/t", 0o755)], "/srv/t") == []


def test_doctor_reads_the_modes_on_the_way(tmp_path: Path) -> None:
    state = tmp_path / "state"
    agents = state / "telemetry"
    agents.mkdir(parents=True)
    state.chmod(0o750)
    f = Facts(config_path="site.toml")
    gather_telemetry(f, TelemetryConfig(exposition_dir=str(agents)))
    assert f.telemetry_path_modes[-2:] == [(str(state), 0o750), (str(agents), 0o755)]
    [warn] = [x for x in diagnose(f) if x.check == CHECK]
    # the first one closed may be pytest's own 0700 directory above it: one line, with a fix
    assert warn.status == "warn" and warn.fix and str(agents) in warn.detail


@pytest.fixture
def running() -> list[Job]:
    return [Job(job_id=5, name="r", state=JobState.RUNNING, nodes=("gpu01",))]


def test_status_says_gpu_use_is_not_available_where_the_files_cannot_be_read(
    running: list[Job], capsys: pytest.CaptureFixture
) -> None:
    [row] = describe_jobs(running, 5, None, None, gpu_unavailable=True)
    assert row["telemetry"] and row["gpu"] is None and gpu_cell(row) == "not available"
    print_status([row], detail=True)
    detail = capsys.readouterr().out
    assert "GPU use:     not available" in detail and "slurm-dl doctor" in detail, detail
    assert all(len(line) <= 80 for line in detail.splitlines()), detail
    print_status([{**row, "explain": None}], detail=False)
    assert "GPU use: not available" in capsys.readouterr().out
    [row] = describe_jobs(running, 5, None, [])  # readable, but no agent names the job
    assert gpu_cell(row) == "no samples"


def test_status_reads_the_directory_only_where_it_can(tmp_path: Path) -> None:
    assert _gpu_samples(TelemetryConfig()) == (None, False)
    assert _gpu_samples(TelemetryConfig(exposition_dir=str(tmp_path / "absent"))) == (None, True)
    assert _gpu_samples(TelemetryConfig(exposition_dir=str(tmp_path))) == ([], False)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "site-configs").glob("*.toml")), ids=lambda p: p.name
)
def test_no_shipped_example_puts_telemetry_in_the_prioritizers_state_directory(path: Path) -> None:
    where = tomllib.loads(path.read_text()).get("telemetry", {}).get("exposition_dir")
    if where is None:
        pytest.skip("no telemetry directory")
    assert not Path(where).is_relative_to(STATE_DIR), (
        f"{path.name}: {where} is inside {STATE_DIR} (0750): users cannot read it"
    )
