#!/usr/bin/env python3
"""The end-to-end check of one Slurm release, from an empty testbed directory (as root).

    python scripts/release_acceptance.py --slurm 24.11

1. ``slurm-dl testbed up --slurm R`` (timed; the root's first bootstrap time is in its stamp),
2. the filter service and shim: ``--gpus=nosuchgpu:1`` is refused with the filter's message and
   ``--gpus=16`` is reshaped onto two 8-GPU nodes,
3. ``dlsubmit train --dry-run`` and a real ``dlsubmit train`` of a checkpointable job on every GPU,
4. a short job arrives and ``slurm-dl prioritizer run`` sends the long job USR2 and requeues it
   (Restarts >= 1); the short job runs.
Prints one line per check and a JSON summary; exit 1 when a check fails. The machine may be
shared: times are wall-clock and indicative only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
SLURM_DL = [PY, "-m", "slurm_dl.cli.main"]
DLSUBMIT = [PY, "-m", "slurm_dl.dlsubmit.cli"]
# The "training": a step counter checkpointed every step and on USR2 (then it stops); resumed,
# it starts from the checkpoint. Long enough to be preempted. With --launcher none it runs once
# per node, so only rank 0 writes the checkpoint (four writers raced on one file and killed the
# job at random).
TRAIN = r"""
import json, os, signal, sys, time
stop = []
signal.signal(signal.SIGUSR2, lambda *a: stop.append(1))
ckpt = os.path.join(os.environ["CKPT_DIR"], "state.json")
state = json.load(open(os.environ["RESUME_FROM"])) if os.environ.get("RESUME_FROM") else {"step": 0}
while state["step"] < int(sys.argv[1]):
    if stop:
        print("checkpointed at", state["step"], flush=True); sys.exit(0)
    state["step"] += 1
    if os.environ.get("SLURM_PROCID", "0") == "0":  # one task per node runs this; rank 0 writes
        json.dump(state, open(ckpt + ".tmp", "w")); os.replace(ckpt + ".tmp", ckpt)
    time.sleep(0.5)
print("finished", state["step"], flush=True)
"""


def run(argv, env, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw
    )


def fields(job_id: int, env) -> dict[str, str]:
    out = run(["scontrol", "-o", "show", "job", str(job_id)], env).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait(what: str, check, timeout: float):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slurm", required=True)
    ap.add_argument("--keep", action="store_true", help="leave the testbed up")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix=f"acc-{args.slurm}-", dir="/tmp"))
    tb = work / "tb"
    base = {**os.environ, "PYTHONUNBUFFERED": "1"}
    results: dict[str, object] = {"slurm": args.slurm}
    procs: list[subprocess.Popen] = []
    ok = True

    def check(name: str, cond: bool, detail: str = "") -> None:
        nonlocal ok
        ok &= bool(cond)
        results[name] = bool(cond)
        print(f"{'ok  ' if cond else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)

    try:
        t0 = time.monotonic()
        up = run(
            [*SLURM_DL, "testbed", "up", "--slurm", args.slurm, "--dir", str(tb)], base, timeout=900
        )
        results["testbed_up_s"] = round(time.monotonic() - t0, 1)
        check(
            "testbed up",
            up.returncode == 0,
            f"{results['testbed_up_s']} s " + up.stderr.strip()[-300:],
        )
        if up.returncode != 0:
            return 1
        t0 = time.monotonic()
        again = run([*SLURM_DL, "testbed", "up", "--dir", str(tb)], base)
        results["testbed_up_again_s"] = round(time.monotonic() - t0, 2)
        if again.returncode != 0:
            return 1
        from slurm_dl.testbed import roots
        from slurm_dl.testbed.releases import release_for

        rel = release_for(args.slurm)
        info = roots.root_info(rel) if not rel.host else None
        results["root_first_bootstrap_s"] = info.get("build_seconds") if info else None
        exports = run([*SLURM_DL, "testbed", "env", "--dir", str(tb)], base).stdout
        env = dict(base)
        for key, value in re.findall(r"^export (\w+)=(.*)$", exports, re.M):
            value = value.strip("'")
            env[key] = value.replace('"$PATH"', base.get("PATH", "")) if key == "PATH" else value
        status = run([*SLURM_DL, "testbed", "status", "--dir", str(tb), "--json"], env)
        check(
            "status names the release",
            json.loads(status.stdout).get("slurm") == rel.name
            and f"SLURM_DL_TESTBED_SLURM={rel.name}" in exports,
            status.stdout.strip()[:120],
        )
        ver = run(["scontrol", "version"], env).stdout.strip()
        check(
            "clients are the release's", rel.name.replace(".0", ".") in ver or rel.name in ver, ver
        )
        config = env.get("SLURM_DL_CONFIG") or str(REPO / "site-configs" / "testbed.toml")

        # -- the filter --------------------------------------------------------------------
        sock = work / "filter.sock"
        procs.append(
            subprocess.Popen(
                [*SLURM_DL, "filter", "serve", "--config", config, "--socket", str(sock)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(work / "filter.log", "w"),
            )
        )
        wait("the filter socket", sock.exists, 30)
        inst = run(
            [
                *SLURM_DL,
                "filter",
                "install",
                "--config",
                config,
                "--slurm-conf-dir",
                str(tb / "etc"),
                "--socket",
                str(sock),
            ],
            env,
        )
        check("filter install", inst.returncode == 0, inst.stderr.strip()[-200:])
        time.sleep(1)
        bad = run(["sbatch", "--parsable", "--hold", "--gpus=nosuchgpu:1", "--wrap", "true"], env)
        check(
            "filter rejects --gpus=nosuchgpu:1",
            bad.returncode != 0 and "nosuchgpu" in bad.stderr,
            next(
                (ln for ln in bad.stderr.splitlines() if "nosuchgpu" in ln),
                bad.stderr.strip() or "accepted",
            ),
        )
        big = run(
            ["sbatch", "--parsable", "--hold", "--gpus=16", "-o", "/dev/null", "--wrap", "true"],
            env,
        )
        f16 = fields(int(big.stdout.strip().split(";")[0]), env) if big.returncode == 0 else {}
        check(
            "filter reshapes --gpus=16 onto two nodes",
            f16.get("NumNodes") in ("2", "2-2") and f16.get("TresPerNode", "").endswith("gpu:8"),
            f"NumNodes={f16.get('NumNodes')} TresPerNode={f16.get('TresPerNode')} {big.stderr.strip()[-120:]}",
        )
        if f16:
            run(["scancel", f16["JobId"]], env)

        # -- dlsubmit --------------------------------------------------------------------------
        prog = work / "train.py"
        prog.write_text(TRAIN)
        os.chdir(work)
        common = [
            "--gpus",
            "32",
            "--nodes",
            "4",
            "--time",
            "30",
            "--name",
            "long",
            "--launcher",
            "none",
        ]
        cmd = ["--", PY, str(prog), "2000"]
        dry = run([*DLSUBMIT, "train", "--dry-run", *common, *cmd], env, cwd=work)
        check(
            "dlsubmit train --dry-run",
            dry.returncode == 0 and "#SBATCH" in dry.stdout,
            dry.stderr.strip()[-200:],
        )
        sub = run([*DLSUBMIT, "train", "--json", *common, *cmd], env, cwd=work)
        doc = json.loads(sub.stdout) if sub.returncode == 0 else {}
        check("dlsubmit train submits", bool(doc.get("job_id")), sub.stderr.strip()[-200:])
        long_id = int(doc["job_id"])
        wait("the long job to run", lambda: fields(long_id, env).get("JobState") == "RUNNING", 90)
        ckpt = work / doc["checkpoint_dir"] / "state.json"
        wait("the long job's first checkpoint", ckpt.exists, 60)
        short = run(
            [
                "sbatch",
                "--parsable",
                "--gpus=1",
                "--time=5",
                "-o",
                str(work / "short.out"),
                "--wrap",
                "echo short ran; sleep 3",
            ],
            env,
        )
        short_id = int(short.stdout.strip().split(";")[0])
        daemon_log = work / "prioritizer.log"
        procs.append(
            subprocess.Popen(
                [
                    *SLURM_DL,
                    "prioritizer",
                    "run",
                    "--init",
                    "--config",
                    config,
                    "--db",
                    f"sqlite:///{work / 'prio.db'}",
                    "--verbose",
                ],
                env=env,
                stdout=open(daemon_log, "w"),
                stderr=subprocess.STDOUT,
            )
        )
        t0 = time.monotonic()
        events = work / doc["checkpoint_dir"] / ".dlsubmit" / "events"
        try:
            wait(
                "USR2 to reach the long job",
                lambda: events.exists() and "preempt" in events.read_text(),
                150,
            )
            check(
                "long job got USR2", True, f"{time.monotonic() - t0:.0f} s after the daemon started"
            )
            restarts = wait(
                "the long job to be requeued",
                lambda: int(fields(long_id, env).get("Restarts", 0) or 0),
                150,
            )
            check("long job requeued (Restarts >= 1)", restarts >= 1, f"Restarts={restarts}")
            wait(
                "the short job to run",
                lambda: (
                    fields(short_id, env).get("JobState") in ("RUNNING", "COMPLETING", "COMPLETED")
                ),
                120,
            )
            check("short job ran", True, f"{time.monotonic() - t0:.0f} s after the daemon started")
        except AssertionError as e:
            text = daemon_log.read_text()
            check(
                "preemption",
                False,
                f"{e}; long job: {fields(long_id, env).get('JobState')}, short job: "
                f"{fields(short_id, env).get('JobState')}; daemon log: {text[:1500]} … {text[-600:]}",
            )
        log = daemon_log.read_text()
        check("prioritizer names the release", f"Slurm {rel.name}" in log, "")
        run(["scancel", str(long_id), str(short_id)], env)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        if not args.keep:
            run([*SLURM_DL, "testbed", "down", "--dir", str(tb)], base)
            shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(results), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
