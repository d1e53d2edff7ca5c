"""The ledger after a kill -9 at random points equals the one the same cycles produce uninterrupted.

    python benchmarks/bench_kill9.py --record REC.json.gz [--frames 60] [--dir /tmp/kill9-rec]
    python benchmarks/bench_kill9.py REC.json.gz [--kills 5] [--seed N] [--postgres]

``--record`` brings up a 4-node testbed, sends it a stream of short jobs (some tagged with a class
and a deadline, as the filter tags them) and records, once a second, what each of the snapshot's
Slurm commands printed (``squeue``, ``sinfo --json``, ``scontrol show topology/partition``,
``sprio``) and when: the inputs of a prioritizer cycle in Slurm's own format.

The replay runs the daemon's own cycle (``Prioritizer.run_cycle`` over the real CLI backend and
its parsers, the store a real SQLite file, or PostgreSQL with ``--postgres``) over the recorded
frames in order, once uninterrupted and once in a child process that is SIGKILLed after a random
delay (seeded; the seed is printed) and restarted ``--kills`` times; each restart goes on with the
frame after the last cycle its store saved (``Store.ledger_cycle``). Slurm's side is a file: the
SiteFactor each ``scontrol update`` set survives the kill as it would in slurmctld, and ``sprio``
answers from it. The cycle reads no clock: ``now`` is the frame's recorded time. Then compares
the two stores exactly: the ledger (``Ledger.to_dict``, which holds the deadline admission's
promises), the stored SiteFactor rows and the SiteFactor Slurm ended with. Prints one JSON line
and one human line: cycles, kills (where each landed), equal true/false and any difference.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurm_dl.core.errors import SlurmError  # noqa: E402
from slurm_dl.slurm import CliBackend  # noqa: E402
from slurm_dl.slurm.dialects import dialect_for_release, release_of_version  # noqa: E402
from slurm_dl.slurm.runner import SlurmResult  # noqa: E402

CONFIG = ROOT / "site-configs" / "testbed.toml"
RECORDING = ROOT / "tests" / "data" / "kill9_frames.json.gz"
"""A recording made by ``--record`` on the 22.05 testbed (60 frames, about 40 jobs)."""


def key(argv) -> str:
    return " ".join(argv)


# --- recording ------------------------------------------------------------------------------
class RecordingBackend(CliBackend):
    """The CLI backend; what each command printed during a snapshot goes into ``frame``."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.frame: dict[str, str] | None = None

    def _run(self, argv, **kw) -> SlurmResult:
        r = super()._run(argv, **kw)
        if self.frame is not None:
            self.frame[key(argv)] = r.stdout
        return r


def record(path: Path, frames: int, tb_dir: str, seed: int) -> dict:
    """Record ``frames`` snapshots of a live testbed under a stream of short jobs."""
    from slurm_dl.testbed import Testbed, submit

    from bench_live_scale import local_users

    rng = random.Random(seed)
    tb = Testbed(tb_dir, nodes=4, gpus_per_node=8, gpu_type="h100")
    tb.down()
    tb.up()
    env = tb.env()
    people = local_users(4)
    backend = RecordingBackend(env)
    version = subprocess.run(
        ["scontrol", "version"], env=env, capture_output=True, text=True
    ).stdout
    texts: list[str] = []
    index: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    submitted = 0
    try:
        for i in range(frames):
            for _ in range(rng.choice((0, 1, 1, 2, 3))):
                user, group = rng.choice(people)
                gpus = rng.choice((1, 2, 4, 8))
                args = [
                    f"--uid={user}",
                    f"--gid={group}",
                    "--output=/dev/null",
                    f"--gres=gpu:{gpus}",
                    "-t",
                    "5",
                    f"--comment=dl:ckpt={rng.choice((0, 1))}",
                ]
                jid = submit(
                    f"#!/bin/sh\nsleep {rng.randint(3, 20)}\n", env, args, workdir=Path("/tmp")
                )
                submitted += 1
                if rng.random() < 0.6:  # tagged as the filter tags: a class, some with a deadline
                    cls = rng.choice(("train", "train", "inference", "sweep", "interactive"))
                    tag = f"sdl1:class={cls};ckpt=1;gpus={gpus};shape=any"
                    if rng.random() < 0.5:
                        tag += f";deadline={int(time.time()) + rng.choice((5, 30, 120, 600))}"
                    subprocess.run(
                        ["scontrol", "update", f"JobId={jid}", f"AdminComment={tag}"],
                        env=env,
                        check=True,
                        capture_output=True,
                    )
            backend.frame = {}
            snap = backend.snapshot()
            frame = {}
            for k, text in backend.frame.items():
                if text not in index:
                    index[text] = len(texts)
                    texts.append(text)
                frame[k] = index[text]
            backend.frame = None
            out.append({"taken_at": snap.taken_at, "outputs": frame})
            time.sleep(1.0)
    finally:
        tb.down()
    doc = {"version": version, "texts": texts, "frames": out, "jobs_submitted": submitted}
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return {
        "frames": frames,
        "jobs_submitted": submitted,
        "distinct_outputs": len(texts),
        "bytes": path.stat().st_size,
    }


# --- replay ---------------------------------------------------------------------------------
def load_recording(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


class ReplayBackend(CliBackend):
    """The CLI backend (its parsers and SiteFactor grouping) over recorded command outputs.

    ``frame``: which recorded snapshot the next ``snapshot()`` serves. Slurm's state (each job's
    SiteFactor) lives in ``state_path`` and is written, atomically, before a write returns: it
    outlives a kill -9 of the daemon as slurmctld's would."""

    def __init__(self, recording: dict, state_path: Path) -> None:
        super().__init__({})
        self.rec = recording
        self.state_path = state_path
        self.frame = 0
        self.site_factor: dict[int, int] = (
            {int(k): v for k, v in json.loads(state_path.read_text()).items()}
            if state_path.exists()
            else {}
        )
        self.writes_refused: list[str] = []

    def dialect(self):
        if self._dialect is None:
            self._dialect = dialect_for_release(
                release_of_version(self.rec["version"]), "the recording"
            )
        return self._dialect

    def snapshot(self, now: float | None = None):
        return super().snapshot(now=self.rec["frames"][self.frame]["taken_at"])

    def _save_state(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.site_factor, sort_keys=True))
        os.replace(tmp, self.state_path)

    def _run(self, argv, **kw) -> SlurmResult:
        argv = tuple(argv)
        outputs = self.rec["frames"][self.frame]["outputs"]
        if argv[:2] == ("scontrol", "update") and argv[-1].startswith("SiteFactor="):
            value = int(argv[-1].split("=", 1)[1])
            for jid in argv[2].removeprefix("jobid=").split(","):
                self.site_factor[int(jid)] = value
            self._save_state()
            return SlurmResult(argv, "", "")
        text = outputs.get(key(argv))
        if text is None:
            self.writes_refused.append(key(argv))
            raise SlurmError(f"{key(argv)}: not in the recording", command=list(argv), returncode=1)
        text = self.rec["texts"][text]
        if (
            argv[0] == "sprio"
        ):  # the pending jobs slurmctld knew then, with the SiteFactor set since
            lines = []
            for line in text.splitlines():
                jid = line.strip().partition("|")[0]
                if jid.isdigit():
                    lines.append(f"{jid}|{self.site_factor.get(int(jid), 0)}")
            text = "\n".join(lines) + "\n"
        return SlurmResult(argv, text, "")


def replay_config(tmp: Path):
    """The testbed's site config without preemption (its writes would change the jobs that the
    recording fixed; the preemption state machine's own kill -9 test runs on the live testbed)."""
    from slurm_dl.cli.config_file import load_config
    from slurm_dl.testbed.site_toml import with_setting

    path = tmp / "site.toml"
    path.write_text(with_setting(CONFIG.read_text(), "preemption", "enabled", False))
    return load_config(path)


def child(rec_path: str, url: str, state: str, workdir: str) -> int:
    """Run cycles from the store's last saved one to the end of the recording; say each step."""
    from prioritizer import Prioritizer
    from slurm_dl.store import Store

    rec = load_recording(Path(rec_path))
    store = Store(url)
    backend = ReplayBackend(rec, Path(state))
    p = Prioritizer(replay_config(Path(workdir)), backend, store)
    save = store.save_cycle

    def said_save(w):
        print(f"save {w.cycle}", flush=True)
        save(w)
        print(f"saved {w.cycle}", flush=True)

    store.save_cycle = said_save
    backend.frame = store.ledger_cycle()
    print(f"start {backend.frame}", flush=True)
    while backend.frame < len(rec["frames"]):
        print(f"cycle {backend.frame + 1}", flush=True)
        p.run_cycle()
        backend.frame = p.cycle_no
    print("done", flush=True)
    store.close()
    return 0


def _spawn(rec: Path, url: str, state: Path, workdir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "--child", str(rec), url, str(state), str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_uninterrupted(rec: Path, url: str, workdir: Path) -> float:
    """Returns the seconds its cycles took (from its start line to its end, imports left out)."""
    p = _spawn(rec, url, workdir / "slurm-a.json", workdir)
    started = None
    for line in p.stdout:
        if line.startswith("start"):
            started = time.monotonic()
    out, err = p.communicate()
    if p.returncode != 0 or started is None:
        raise RuntimeError(f"the uninterrupted replay failed:\n{err[-3000:]}")
    return time.monotonic() - started


def run_with_kills(
    rec: Path, url: str, workdir: Path, kills: int, rng: random.Random, cycle_s: float, frames: int
) -> list[dict]:
    """``kills`` runs, each SIGKILLed a random time after it started its cycles (uniform, up to
    its share of the cycles left: ``cycle_s`` each, the uninterrupted run's pace), then one to
    the end. Returns where each kill landed."""
    state = workdir / "slurm-b.json"
    landed = []
    for k in range(kills + 1):
        p = _spawn(rec, url, state, workdir)
        lines: list[str] = []
        started = threading.Event()

        def read(p=p, lines=lines, started=started) -> None:
            for line in p.stdout:
                lines.append(line.strip())
                if line.startswith("start"):
                    started.set()
            started.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        started.wait(120)
        if k < kills:
            resumed = int(lines[0].split()[1]) if lines and lines[0].startswith("start") else 0
            delay = rng.uniform(0.0, cycle_s * (frames - resumed) / (kills - k + 1))
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
        p.wait()
        reader.join(10)
        err = p.stderr.read()
        if k == kills:
            if p.returncode != 0:
                raise RuntimeError(f"the last replay failed:\n{err[-3000:]}")
            break
        last = lines[-1] if lines else "(nothing: still starting)"
        phase = (
            "finished before the kill"
            if last == "done"
            else "mid-transaction (saving the cycle)"
            if last.startswith("save ")
            else "between cycles (just saved)"
            if last.startswith("saved")
            else "mid-cycle (before its save)"
            if last.startswith("cycle")
            else "at start"
        )
        landed.append(
            {
                "kill": k + 1,
                "delay_s": round(delay, 3),
                "resumed_at_frame": int(lines[0].split()[1])
                if lines and lines[0].startswith("start")
                else None,
                "last_said": last,
                "phase": phase,
                "exit": p.returncode,
            }
        )
    return landed


def stored(url: str) -> dict:
    from slurm_dl.store import Store

    s = Store(url)
    try:
        from sqlalchemy import text

        ledger = s.load_ledger()
        with s.engine.connect() as conn:
            decisions = [
                tuple(r)
                for r in conn.execute(
                    text("SELECT at, job_id, kind, value, reason FROM sdl_decision")
                )
            ]
        return {
            "decisions": decisions,
            "cycle": s.ledger_cycle(),
            "ledger": ledger.to_dict(),
            "admission": ledger.admission,
            "site_factors": s.site_factors(),
            "counts": s.counts(),
        }
    finally:
        s.close()


def differences(a: dict, b: dict, path: str = "") -> list[str]:
    """Where two plain-data trees differ (at most 20 places)."""
    out: list[str] = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'uninterrupted' if k in a else 'killed'}")
            else:
                out += differences(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            out += differences(x, y, f"{path}[{i}]")
    elif a != b:
        out.append(f"{path}: {str(a)[:120]} != {str(b)[:120]}")
    return out[:20]


def compare(rec: Path, urls: tuple[str, str], workdir: Path, kills: int, seed: int) -> dict:
    """The whole comparison: uninterrupted into urls[0], killed ``kills`` times into urls[1]."""
    rng = random.Random(seed)
    frames = len(load_recording(rec)["frames"])
    wall_a = run_uninterrupted(rec, urls[0], workdir)
    t = time.monotonic()
    landed = run_with_kills(rec, urls[1], workdir, kills, rng, wall_a / frames, frames)
    wall_b = time.monotonic() - t
    a, b = stored(urls[0]), stored(urls[1])
    slurm_a = (
        json.loads((workdir / "slurm-a.json").read_text())
        if (workdir / "slurm-a.json").exists()
        else {}
    )
    slurm_b = (
        json.loads((workdir / "slurm-b.json").read_text())
        if (workdir / "slurm-b.json").exists()
        else {}
    )
    diffs = {
        "ledger": differences(a["ledger"], b["ledger"]),
        "admission": differences(a["admission"], b["admission"]),
        "site_factor_rows": differences(
            {str(k): v for k, v in a["site_factors"].items()},
            {str(k): v for k, v in b["site_factors"].items()},
        ),
        "slurm_site_factors": differences(slurm_a, slurm_b),
        "cycle": []
        if a["cycle"] == b["cycle"] == frames
        else [f"{a['cycle']} != {b['cycle']} (of {frames})"],
    }
    ledger = a["ledger"]
    lost = sorted(set(a["decisions"]) - set(b["decisions"]))
    extra = sorted(set(b["decisions"]) - set(a["decisions"]))
    return {
        "decision_records": {
            "uninterrupted": len(a["decisions"]),
            "killed": len(b["decisions"]),
            "lost": len(lost),
            "extra": len(extra),
            "lost_kinds": sorted({d[2] for d in lost}),
            "extra_kinds": sorted({d[2] for d in extra}),
            "lost_example": list(lost[0]) if lost else None,
            "extra_example": list(extra[0]) if extra else None,
        },
        "benchmark": "kill9",
        "seed": seed,
        "cycles": frames,
        "kills": kills,
        "equal": not any(diffs.values()),
        "differences": {k: v for k, v in diffs.items() if v},
        "landed": landed,
        "phases": sorted({x["phase"] for x in landed}),
        "ledger_jobs": len(ledger.get("jobs", ())),
        "admission_promises": len((a["admission"] or {}).get("admitted", {})),
        "site_factor_rows": len(a["site_factors"]),
        "counts_uninterrupted": a["counts"],
        "counts_killed": b["counts"],
        "wall_s": {"uninterrupted": round(wall_a, 2), "with_kills": round(wall_b, 2)},
    }


def main() -> int:
    import argparse
    import tempfile

    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(*sys.argv[2:6])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recording", nargs="?", default=str(RECORDING))
    ap.add_argument(
        "--record", metavar="PATH", help="record a new recording to PATH (needs root and Slurm)"
    )
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument(
        "--dir", default="/tmp/slurm-dl-kill9-rec", help="the recording's testbed directory"
    )
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the kills' random delays (default: a new one, printed)",
    )
    ap.add_argument(
        "--postgres", action="store_true", help="also compare on a throwaway PostgreSQL server"
    )
    args = ap.parse_args()
    if args.record:
        r = record(Path(args.record), args.frames, args.dir, args.seed or 1)
        print(json.dumps(r))
        print(
            f"recorded {r['frames']} frames, {r['jobs_submitted']} jobs, {r['bytes']} bytes: {args.record}"
        )
        return 0
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"seed {seed}", file=sys.stderr, flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="kill9-") as tmp:
        w = Path(tmp) / "sqlite"
        w.mkdir()
        r = compare(
            Path(args.recording),
            (f"sqlite:///{w}/a.db", f"sqlite:///{w}/b.db"),
            w,
            args.kills,
            seed,
        )
        results.append({"store": "sqlite", **r})
        if args.postgres:
            sys.path.insert(0, str(ROOT / "tests" / "integration"))
            import pgserver

            reason = pgserver.unavailable_reason()
            if reason:
                print(f"PostgreSQL left out: {reason}", file=sys.stderr)
            else:
                server = pgserver.PgServer().start()
                try:
                    w = Path(tmp) / "pg"
                    w.mkdir()
                    r = compare(
                        Path(args.recording),
                        (server.create_db("a"), server.create_db("b")),
                        w,
                        args.kills,
                        seed,
                    )
                    results.append({"store": "postgresql", **r})
                finally:
                    server.stop()
    for r in results:
        print(json.dumps(r))
    for r in results:
        print(
            f"kill -9 ({r['store']}): {r['cycles']} cycles, {r['kills']} kills (seed {r['seed']}; "
            f"{', '.join(r['phases'])}); ledger of {r['ledger_jobs']} jobs, {r['admission_promises']} deadline "
            f"promises, {r['site_factor_rows']} SiteFactor rows: equal {str(r['equal']).lower()}"
            + ("" if r["equal"] else f"; differences: {json.dumps(r['differences'])}")
            + f"; decision records {r['decision_records']['uninterrupted']} uninterrupted, "
            f"{r['decision_records']['killed']} killed ({r['decision_records']['lost']} lost, "
            f"{r['decision_records']['extra']} extra)"
        )
    return 0 if all(r["equal"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
