"""``slurm-dl explain`` on a REAL local Slurm: a 200-job queue where the shown contributions add up
to each tier's total for every job, two jobs tied on every factor that show the step ordering
them, and Slurm's start estimate next to the real start for a handful of jobs (printed; run with
``-s`` to see the figures). The prioritizer runs one cycle (``prioritizer once``), preemption off.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.slurm.estimates import expected_starts
from slurm_dl.testbed import submit
from slurm_dl.testbed.client import job_fields
from polling import wait_until as _wait

ROOT = Path(__file__).resolve().parents[2]
TESTBED_TOML = ROOT / "site-configs" / "testbed.toml"
runner = CliRunner()
TIER = re.compile(r"^  tier (\d+) (.+?)\s+(-?\d+\.\d{4})(?: = (.+))?$")


def _config(tmp_path: Path) -> Path:
    text = TESTBED_TOML.read_text().replace(
        "[preemption]\nenabled = true", "[preemption]\nenabled = false"
    )
    assert "enabled = false" in text
    p = tmp_path / "no-preemption.toml"
    p.write_text(text)
    return p


def _cycle(cfg: Path, db: str, env: dict[str, str]) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_dl.cli.main",
            "prioritizer",
            "once",
            "--init",
            "--config",
            str(cfg),
            "--db",
            db,
        ],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
        cwd=ROOT,
    )


def _explain(job_id: int, cfg: Path, db: str, *extra: str) -> tuple[int, str]:
    r = runner.invoke(
        app,
        ["explain", str(job_id), "--config", str(cfg), "--db", db, *extra],
        env={"COLUMNS": "80"},
    )
    return r.exit_code, r.stdout


def _cancel(env, ids) -> None:
    if ids:
        subprocess.run(["scancel", *map(str, ids)], env={**os.environ, **env}, capture_output=True)


def test_200_job_queue_contributions_add_up_and_tied_jobs_show_the_ordering_step(testbed, tmp_path):
    env = testbed.env()
    cfg = _config(tmp_path)
    db = f"sqlite:///{tmp_path / 'prio.db'}"
    nodes = len(testbed.status().nodes)
    ids: list[int] = []
    try:
        ids.append(
            submit(
                "#!/bin/bash\nsleep 600\n",
                env,
                [f"-N{nodes}", "--gres=gpu:8", "--time=15", "-o", "/dev/null"],
            )
        )
        _wait(
            "the blocker to run", lambda: job_fields(ids[0], env).get("JobState") == "RUNNING", 60
        )
        for i in range(198):
            ids.append(
                submit(
                    "#!/bin/bash\ntrue\n",
                    env,
                    [
                        f"--gres=gpu:{1 + i % 4}",
                        f"--time={5 + i % 7}",
                        f"--account=acct{i % 5}",
                        "-o",
                        "/dev/null",
                    ],
                )
            )
        twins = [
            submit(
                "#!/bin/bash\ntrue\n",
                env,
                ["--gres=gpu:2", "--time=9", "--account=twin", "-o", "/dev/null"],
            )
            for _ in range(2)
        ]
        ids += twins
        _cycle(cfg, db, env)
        _cycle(cfg, db, env)

        pending = ids[1:]
        checked = 0
        for job_id in pending:
            code, out = _explain(job_id, cfg, db, "--json", "--no-live")
            assert code == 0, out
            view = json.loads(out)
            assert view["rank"] >= 1 and view["queue"]["position"] >= 1  # 1-based
            for tier in view["tiers"]:
                assert (
                    abs(sum(p["contribution"] for p in tier["factors"]) - tier["total"]) < 1e-9
                ), (job_id, tier)
            checked += 1
        assert checked == 200

        # The text shows the same numbers, and they add up there too.
        for job_id in pending[::20] + twins:
            code, text = _explain(job_id, cfg, db, "--no-live", "--detail")
            assert code == 0, text
            assert all(len(line) <= 80 for line in text.splitlines()), text
            tiers = [m for m in map(TIER.match, text.splitlines()) if m]
            assert tiers, text
            for m in tiers:
                if m.group(4):
                    parts = [float(x) for x in m.group(4).split(" + ")]
                    assert abs(sum(parts) - float(m.group(3))) < 5e-5, m.group(0)

        first, second = sorted(twins)
        code, out = _explain(second, cfg, db, "--json", "--no-live")
        view = json.loads(out)
        tier_totals = [
            [t["total"] for t in explain["tiers"]]
            for explain in (
                json.loads(_explain(j, cfg, db, "--json", "--no-live")[1]) for j in twins
            )
        ]
        assert tier_totals[0] == tier_totals[1]  # tied on every factor
        after = view["ordering"]["after"]
        assert after["job_id"] == first and after["tied_on_every_factor"]
        assert after["step"] in ("submit", "job_id")
        code, text = _explain(second, cfg, db, "--no-live", "--detail")
        assert f"after job {first}: tied on every factor; decided by" in text
        code, text = _explain(second, cfg, db, "--no-live")  # for people: the job ahead, and why
        assert f"ahead:      job {first}, because it was submitted" in text, text
        print(f"\ntied jobs {first} and {second}: ordered by {after['step']} ({after['words']})")
    finally:
        _cancel(env, ids)


def test_estimated_start_next_to_the_real_start(testbed, tmp_path):
    env = testbed.env()
    cfg = _config(tmp_path)
    db = f"sqlite:///{tmp_path / 'prio.db'}"
    nodes = len(testbed.status().nodes)
    ids: list[int] = []
    try:
        # A blocker with a 2-minute limit that ends after 40 s; then jobs whose starts chain on it.
        blocker = submit(
            "#!/bin/bash\nsleep 40\n",
            env,
            [f"-N{nodes}", "--gres=gpu:8", "--time=2", "-o", "/dev/null"],
        )
        ids.append(blocker)
        _wait(
            "the blocker to run", lambda: job_fields(blocker, env).get("JobState") == "RUNNING", 60
        )
        waiting = [
            submit(
                "#!/bin/bash\nsleep 20\n",
                env,
                ["-N1", "--gres=gpu:8", "--time=1", "-o", "/dev/null"],
            )
            for _ in range(nodes)
        ]
        waiting += [
            submit(
                "#!/bin/bash\nsleep 10\n",
                env,
                [f"-N{nodes}", "--gres=gpu:8", "--time=1", "-o", "/dev/null"],
            )
            for _ in range(2)
        ]
        ids += waiting
        _cycle(cfg, db, env)
        estimates = _wait(
            "Slurm's start estimates",
            lambda: (lambda e: e if len(e) == len(waiting) else None)(
                expected_starts(waiting, env)
            ),
            60,
        )
        shown = {}
        for job_id in waiting:
            code, out = _explain(job_id, cfg, db, "--json")
            assert code == 0, out
            shown[job_id] = json.loads(out)["estimated_start"]
            assert shown[job_id]["at"] is not None and shown[job_id]["source"] == "slurm", shown[
                job_id
            ]
        asked_at = time.time()

        def started(job_id: int) -> float | None:
            f = job_fields(job_id, env)
            if f.get("JobState") in ("RUNNING", "COMPLETING", "COMPLETED"):
                return time.mktime(time.strptime(f["StartTime"], "%Y-%m-%dT%H:%M:%S"))
            return None

        real = {j: _wait(f"job {j} to start", lambda j=j: started(j), 300) for j in waiting}
        print(f"\nestimate asked at {time.strftime('%H:%M:%S', time.localtime(asked_at))}")
        print("job     estimated  (explain)  real       real - estimated")
        for j in waiting:
            print(
                f"{j:<7} {time.strftime('%H:%M:%S', time.localtime(estimates[j]))}   "
                f"{time.strftime('%H:%M:%S', time.localtime(shown[j]['at']))}   "
                f"{time.strftime('%H:%M:%S', time.localtime(real[j]))}   {real[j] - estimates[j]:+.0f} s"
            )
        assert all(real[j] > 0 for j in waiting)
    finally:
        _cancel(env, ids)


def test_right_after_a_requeue_one_start_and_the_checkpoint_it_resumes_from(
    testbed, tmp_path, monkeypatch
):
    """A job requeued while another takes its GPUs for 5 min: Slurm may start it again in
    seconds, but explain's start is when the GPUs free up, said once; and it names the restart
    against the site's cap and the checkpoint its dlsubmit record finds."""
    env = testbed.env()
    cfg = _config(tmp_path)
    db = f"sqlite:///{tmp_path / 'prio.db'}"
    nodes = len(testbed.status().nodes)
    whole = [f"-N{nodes}", "--gres=gpu:8", "--time=5", "-o", "/dev/null"]
    ids: list[int] = []
    try:
        victim = submit("#!/bin/bash\nsleep 300\n", env, [*whole, "--requeue", "-J", "train"])
        ids.append(victim)
        _wait("the job to run", lambda: job_fields(victim, env).get("JobState") == "RUNNING", 60)
        subprocess.run(["scontrol", "requeue", str(victim)], env={**os.environ, **env}, check=True)
        ids.append(submit("#!/bin/bash\nsleep 300\n", env, whole))
        _wait(
            "the other job to run", lambda: job_fields(ids[1], env).get("JobState") == "RUNNING", 60
        )
        frees = time.time() + 300
        ckpt = tmp_path / "ckpt"
        ckpt.mkdir()
        (ckpt / "step-000031.json").write_text("{}")
        monkeypatch.setenv("SLURM_DL_STATE_DIR", str(tmp_path / "state"))
        from slurm_dl.dlsubmit.status import state_dir

        state_dir().mkdir(parents=True)
        record = {"name": "train", "checkpoint_dir": str(ckpt), "ckpt_globs": ["step-*"]}
        (state_dir() / f"{victim}.json").write_text(json.dumps(record))
        _cycle(cfg, db, env)
        code, out = _explain(victim, cfg, db, "--json")
        assert code == 0, out
        doc = json.loads(out)
        est = doc["estimated_start"]
        print(f"\nSlurm's time in {(est.get('slurm_at') or 0) - time.time():+.0f} s; shown {est}")
        assert est["at"] is not None and est["at"] >= frees - 90, est
        code, text = _explain(victim, cfg, db)
        print(text)
        assert "restart 1 of 5, resumes from step-000031.json" in text, text
        assert "(in 2 s)" not in text and all(len(line) <= 80 for line in text.splitlines())
    finally:
        _cancel(env, ids)
