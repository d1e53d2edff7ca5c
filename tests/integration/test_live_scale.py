"""The live load scenario at CI size: 32 nodes, 2,000 jobs, the same load with slurm-dl off and
on (benchmarks/bench_live_scale.py, which the full-size measurement runs at 256 nodes).

Structural facts only, read from slurmctld's own ``sdiag`` and the prioritizer's metrics; nothing
here asserts on time. About 70 s on 2 cores.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import TEST_SLURM, require_testbed_support
from slurm_dl.testbed.cluster import munge_installed

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_live_scale as scenario  # noqa: E402

JOBS = 2000
# No RPC type may come more often than once per this many jobs with slurm-dl on: what slurm-dl adds
# is per cycle, per sample or per question, and SiteFactor pushes are bounded per cycle.
JOBS_PER_RPC = 2


@pytest.mark.skipif(
    TEST_SLURM is not None, reason="run on the host's own Slurm (sbatch --uid, runuser)"
)
def test_the_same_load_with_slurm_dl_on_and_off() -> None:
    require_testbed_support()
    # The jobs run as other users from the testbed's spool: a directory they can enter, unlike
    # pytest's own temporary one.
    state = Path(tempfile.mkdtemp(prefix="sdl-ls-", dir="/tmp"))
    state.chmod(0o755)
    args = scenario.parser().parse_args(
        [
            "--nodes",
            "32",
            "--jobs",
            str(JOBS),
            "--window",
            "20",
            "--seconds",
            "5-20",
            "--dir",
            str(state),
            "--quiet",
        ]
    )
    try:
        r = scenario.run(args)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    off, on = r["off"], r["on"]

    for phase in (off, on):
        assert phase["jobs"] == JOBS and phase["sbatch_failed"] == 0, phase["sbatch_errors"]
        # every job submitted is still queued or has finished, exactly once
        assert phase["accounted"]["in_queue"] + phase["accounted"]["finished"] == JOBS, phase[
            "accounted"
        ]
        assert set(phase["accounted"]["finished_by_state"]) <= {"COMPLETED"}, phase["accounted"]
        assert phase["sdiag"]["rpc"]["REQUEST_SUBMIT_BATCH_JOB"]["count"] == r["sbatch_calls"]
        assert not phase["background"]["failed"], phase["background"]

    # slurm-dl was live: the filter answered (submissions went through the shim), the prioritizer
    # cycled without a failure and pushed SiteFactors, users' explain requests were answered
    prio = on["prioritizer"]
    assert prio["cycles_ok"] >= 2 and prio["cycles_failed"] == 0, prio
    assert prio["site_factor_pushes"] > 0
    assert on["background"]["ok"]["agent"] >= 1
    if munge_installed() and shutil.which(
        "runuser"
    ):  # the explain endpoint needs the testbed's munged
        assert on["background"]["ok"].get("explain", 0) > 0, on["background"]
    assert on["sdiag"]["rpc"]["REQUEST_UPDATE_JOB"]["count"] > 0

    # no RPC type grows with the job count beyond the stated margin
    for name, rpc in on["sdiag"]["rpc"].items():
        assert rpc["count"] <= JOBS / JOBS_PER_RPC, (name, rpc)
    # the same submissions reached slurmctld as often with the filter as without it
    assert r["rpc_count_ratio_per_job"]["REQUEST_SUBMIT_BATCH_JOB"] == 1.0
    for key in ("submit", "job_info", "overall"):
        assert r["rpc_time_ratio"][key] is not None
