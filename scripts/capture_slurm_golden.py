#!/usr/bin/env python3
"""Record what one Slurm release prints, for the parsers' contract tests (tests/data/slurm-R/).

    python scripts/capture_slurm_golden.py --slurm 24.11      # as root; starts its own testbed

Starts a fresh testbed with accounting, runs a fixed scenario (a running --gpus=3 job with a
comment, a held 4-node --gres=gpu:h100:8 job, a finished --gres=gpu:h100:2 job, a requeued and
held --gpus-per-node=2 job), writes squeue/sinfo/node/sacct JSON, ``squeue -O`` and
``scontrol -o show job`` output and ``scontrol version``, then stops the testbed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurm_dl.slurm.dialects import dialect_for_release  # noqa: E402
from slurm_dl.slurm.runner import run_slurm  # noqa: E402
from slurm_dl.slurm.squeue_format import TIME_FORMAT_ENV, squeue_format_argv  # noqa: E402
from slurm_dl.testbed import Testbed, submit, wait_for_job_state  # noqa: E402

SLEEP = "#!/bin/sh\nsleep 600\n"
DONE = "#!/bin/sh\ntrue\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slurm", required=True, help="22.05, 24.11 or 26.05")
    ap.add_argument("--out", type=Path, default=None, help="default: tests/data/slurm-RELEASE")
    args = ap.parse_args()
    out = args.out or REPO / "tests" / "data" / f"slurm-{args.slurm}"
    work = Path(tempfile.mkdtemp(prefix="golden-", dir="/tmp"))
    tb = Testbed(
        work / "tb", nodes=4, gpus_per_node=8, gpu_type="h100", accounting=True, slurm=args.slurm
    )
    try:
        tb.up()
        env = tb.env()
        logs = [f"--output={work}/%j.out", "--chdir=/tmp"]
        run3 = submit(
            SLEEP,
            env,
            [*logs, "--gpus=3", "-t", "30", "-J", "contract-run3", "--comment=hello contract"],
        )
        held = submit(
            SLEEP,
            env,
            [*logs, "-N", "4", "--gres=gpu:h100:8", "-t", "10", "--hold", "-J", "contract-held"],
        )
        done = submit(DONE, env, [*logs, "--gres=gpu:h100:2", "-t", "5", "-J", "contract-done"])
        wait_for_job_state(done, env, ("COMPLETED",), timeout=60)
        requeued = submit(
            SLEEP, env, [*logs, "--gpus-per-node=2", "-t", "20", "-J", "contract-requeued"]
        )
        wait_for_job_state(run3, env, ("RUNNING",), timeout=60)
        wait_for_job_state(requeued, env, ("RUNNING",), timeout=60)
        run_slurm(["scontrol", "requeue", str(requeued)], env=env)
        run_slurm(["scontrol", "hold", str(requeued)], env=env)
        time.sleep(2)
        out.mkdir(parents=True, exist_ok=True)
        dialect = dialect_for_release(args.slurm)

        def save(name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> None:
            text = run_slurm(argv, env={**env, **(extra_env or {})}, timeout=60).stdout
            if name.endswith(".json"):
                text = json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"
            (out / name).write_text(text)

        save("scontrol_version.txt", ["scontrol", "version"])
        save("squeue.json", ["squeue", "--json"])
        save("squeue_format.txt", squeue_format_argv("all"), TIME_FORMAT_ENV)
        save("nodes.json", list(dialect.node_command))
        save("sinfo.json", ["sinfo", "--json"])
        save("scontrol_show_job.txt", ["scontrol", "-o", "show", "job"])
        time.sleep(3)  # slurmdbd gets the finished job's record
        save("sacct.json", ["sacct", "--json", "-j", str(done)])
        (out / "scenario.json").write_text(
            json.dumps({"run3": run3, "held": held, "done": done, "requeued": requeued}, indent=1)
            + "\n"
        )
        print(f"wrote {out}")
        return 0
    finally:
        tb.down()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.umask(0o022)
    raise SystemExit(main())
