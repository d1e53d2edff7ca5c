"""A held job's time is not waiting, on a real Slurm: what Slurm reports for a job held from its
submission and then released (reason JobHeldUser and no eligible time while held; an eligible
time at the release afterwards), and the ledger, fed the backend's snapshots, counting its wait
from the release, not from its submission.
"""

from __future__ import annotations

import subprocess
import time

from slurm_dl.core.ledger import Ledger
from slurm_dl.slurm import CliBackend
from slurm_dl.testbed import submit
from polling import wait_until

H = 3600.0


def test_a_job_held_then_released_waits_from_its_release(make_testbed) -> None:
    tb = make_testbed(nodes=1, gpus_per_node=2)
    tb.up()
    env = tb.env()
    slurm = CliBackend(env)
    led = Ledger(H)
    busy = submit("#!/bin/bash\nsleep 120\n", env, ["--gpus=2", "-t", "5", "-o", "/dev/null"])
    held = submit("#!/bin/bash\ntrue\n", env, ["--hold", "--gpus=2", "-t", "5", "-o", "/dev/null"])
    try:

        def job():
            snap = slurm.snapshot()
            led.observe(snap.jobs, snap.taken_at)
            return next(j for j in snap.jobs if j.job_id == held), snap.taken_at

        j, _ = job()
        assert j.held and j.state_reason == "JobHeldUser" and j.eligible_time is None, j
        time.sleep(3)
        j, _ = job()
        assert j.held and led.waited(held) == 0.0
        subprocess.run(["scontrol", "release", str(held)], env=env, check=True, capture_output=True)
        released = time.time()
        wait_until(
            "Slurm to set the eligible time",
            lambda: job()[0].eligible_time is not None,
            30,
            poll=0.5,
        )
        time.sleep(2)
        j, now = job()
        assert not j.held and j.pending and j.eligible_time >= int(released) - 1, (j, released)
        assert j.submit_time < released - 2  # the submit time stays; the hold is left out
        assert 1.5 <= led.waited(held) <= now - released + 1.0, (led.waited(held), now - released)
    finally:
        for job_id in (held, busy):
            subprocess.run(["scancel", str(job_id)], env=env, capture_output=True)
