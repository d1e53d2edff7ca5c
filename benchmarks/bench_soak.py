"""A soak of slurm-dl's services on a live testbed: the prioritizer, the filter and GPU-agent files
under a steady stream of short jobs for many cycles; their memory, open files, the database size
and the cycle time at the start, the middle and the end.

    python benchmarks/bench_soak.py --nodes 8 --cycles 2000 --interval 0.2 [--dir /tmp/soak]

A day at the default 5 s interval is 17,280 cycles; a short interval gets there sooner (the
cycle does the same work, only more often). Prints one JSON line and one human line: each
figure at start, middle and end, its growth from the first to the last sample, and the failed
cycles. Needs root and Slurm (the testbed). It never kills the daemon: benchmarks/bench_kill9.py
compares the ledger after a kill -9 with an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_live_scale as live  # noqa: E402

from slurm_dl.daemon.process_memory import MEMORY_DIR_ENV, growth as memory_growth  # noqa: E402


def proc_figures(pid: int) -> dict:
    """RSS (MiB) and open file descriptors of a process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rss = (
            next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            / 1024
        )
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return {"rss_mib": None, "fds": None}
    return {"rss_mib": round(rss, 1), "fds": fds}


def memory_figures(m: dict) -> dict:
    """Where the prioritizer's memory sits, from its metrics: Python's allocated blocks, the C
    heap in use and freed-but-kept, SQLite's (MiB; None where the daemon has no such figure)."""

    def mib(name: str) -> float | None:
        v = m.get("slurm_dl_prioritizer_" + name)
        return None if v is None else round(v / 2**20, 1)

    blocks = m.get("slurm_dl_prioritizer_python_allocated_blocks")
    return {
        "python_blocks": None if blocks is None else int(blocks),
        "malloc_used_mib": mib("malloc_used_bytes"),
        "malloc_free_mib": mib("malloc_free_bytes"),
        "sqlite_mib": mib("sqlite_memory_bytes"),
    }


def db_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.glob("ledger.db*"))


def db_rows(root: Path) -> dict:
    """Rows per table and the saved ledger's size, read through a read-only handle (what grows)."""
    import sqlite3
    from contextlib import closing

    path = root / "ledger.db"
    out: dict = {}
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)) as conn:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            for t in sorted(tables):
                out[t] = conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
            row = conn.execute("SELECT length(data) FROM sdl_ledger WHERE id = 1").fetchone()
            out["ledger_json_bytes"] = row[0] if row else 0  # the document, then its rows
            for t in ("sdl_ledger_job", "sdl_ledger_entry"):
                if t in tables:
                    out["ledger_json_bytes"] += (
                        conn.execute(f"SELECT sum(length(data)) FROM {t}").fetchone()[0] or 0
                    )
    except sqlite3.Error as e:
        out["error"] = str(e)
    return out


def snapshot(
    directory: Path, pids: dict[str, int], n: int, timeout_s: float = 300.0
) -> dict[str, str | None]:
    """Ask each traced process for its ``n``-th memory snapshot (SIGUSR1) and wait for the files."""
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR1)
    end = time.monotonic() + timeout_s
    paths: dict[str, str | None] = {}
    for name, pid in pids.items():
        path = directory / f"{name}-{pid}-{n}.tracemalloc"
        while not path.exists() and time.monotonic() < end:
            time.sleep(0.5)
        paths[name] = str(path) if path.exists() else None
    return paths


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument(
        "--interval", type=float, default=0.2, help="the prioritizer's interval_seconds"
    )
    ap.add_argument("--dir", default="/tmp/slurm-dl-soak")
    ap.add_argument("--queue", type=int, default=100, help="keep about this many jobs queued")
    ap.add_argument("--sample-every", type=float, default=20.0)
    ap.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="stop after this many minutes even if --cycles is not reached",
    )
    ap.add_argument(
        "--trace-memory",
        type=int,
        default=0,
        metavar="FRAMES",
        help="run the prioritizer and the filter with Python's allocation tracing (FRAMES deep) "
        "and compare their snapshots from --snapshot-at minutes to the end",
    )
    ap.add_argument("--snapshot-at", type=float, default=10.0, metavar="MINUTES")
    args = ap.parse_args()

    from slurm_dl.testbed import Testbed

    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    tb = Testbed(args.dir, nodes=args.nodes, gpus_per_node=8)
    tb.down()
    for db in tb.layout.root.glob("ledger.db*"):
        db.unlink()
    shutil.rmtree(
        tb.layout.state_save_dir, ignore_errors=True
    )  # a fresh controller: no jobs of a last run
    tb.up()
    env = tb.env()
    logs = Path(args.dir) / "soak"
    logs.mkdir(parents=True, exist_ok=True)
    agent_dir = logs / "agent"
    agent_dir.mkdir(exist_ok=True)
    nodes = [f"gpu{i:0{2 if args.nodes <= 99 else 3}d}" for i in range(1, args.nodes + 1)]
    sv = live.Services()
    bg = live.Background()
    samples: list[dict] = []
    stop = threading.Event()
    submitted = [0]
    try:
        config = live.site_config(tb, nodes, args.interval, agent_dir)
        snaps = logs / "memory"
        shutil.rmtree(snaps, ignore_errors=True)
        traced = (
            {"PYTHONTRACEMALLOC": str(args.trace_memory), MEMORY_DIR_ENV: str(snaps)}
            if args.trace_memory
            else {}
        )
        sv = live.start_services(tb, {**env, **traced}, config, logs)
        prio_pid, filter_pid = sv.procs[1].pid, sv.procs[0].pid
        people = live.local_users(6)
        rng = random.Random(7)

        def feed() -> None:  # a steady stream of short jobs through the filter
            while not stop.is_set():
                queued = len(
                    subprocess.run(
                        ["squeue", "-h", "-o", "%i"],
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=60,
                    ).stdout.split()
                )
                if queued < args.queue:
                    user, group = rng.choice(people)
                    s = live.Submission(
                        user,
                        group,
                        f"acct{rng.randrange(3)}",
                        rng.choice((1, 2, 4)),
                        rng.randint(2, 8),
                        10,
                        rng.random() < 0.2,
                    )
                    if (
                        subprocess.run(
                            s.argv(), env=env, capture_output=True, timeout=60
                        ).returncode
                        == 0
                    ):
                        submitted[0] += 10
                stop.wait(1.0)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        bg.every("agent", 5.0, live.agents(env, nodes[:2], agent_dir))
        t0 = time.monotonic()
        last = (0.0, 0.0)
        snapped: list[dict] = []
        while True:
            m = live.scrape(sv.prio_port)
            dsum = m.get("slurm_dl_prioritizer_cycle_duration_seconds_sum", 0.0)
            dcount = m.get("slurm_dl_prioritizer_cycle_duration_seconds_count", 0.0)
            seg = (dsum - last[0]) / (dcount - last[1]) if dcount > last[1] else None
            last = (dsum, dcount)
            cycles = int(m.get("slurm_dl_prioritizer_cycles_total{ok}", 0))
            failed = int(
                sum(
                    v
                    for k, v in m.items()
                    if k.startswith("slurm_dl_prioritizer_cycles_total{") and not k.endswith("{ok}")
                )
            )
            samples.append(
                {
                    "t_s": round(time.monotonic() - t0, 1),
                    "cycles_ok": cycles,
                    "cycles_failed": failed,
                    "cycle_mean_s": round(seg, 4) if seg is not None else None,
                    "prioritizer": {**proc_figures(prio_pid), **memory_figures(m)},
                    "filter": proc_figures(filter_pid),
                    "db_bytes": db_bytes(tb.layout.root),
                    "db_rows": db_rows(tb.layout.root),
                    "jobs_submitted": submitted[0],
                }
            )
            say(json.dumps(samples[-1]))
            out_of_time = args.minutes is not None and time.monotonic() - t0 >= args.minutes * 60
            done = (
                cycles >= args.cycles or out_of_time or any(p.poll() is not None for p in sv.procs)
            )
            if traced and (
                len(snapped) == 0
                and time.monotonic() - t0 >= args.snapshot_at * 60
                or len(snapped) == 1
                and done
            ):
                snapped.append(
                    snapshot(
                        snaps, {"prioritizer": prio_pid, "filter": filter_pid}, len(snapped) + 1
                    )
                )
                say(f"memory snapshot {len(snapped)}: {snapped[-1]}")
            if done:
                break
            time.sleep(args.sample_every)
    finally:
        stop.set()
        bg.end()
        sv.stop()
        tb.down()

    first, mid, end = (
        samples[1] if len(samples) > 1 else samples[0],
        samples[len(samples) // 2],
        samples[-1],
    )

    def growth(get) -> float | None:
        a, b = get(first), get(end)
        return round(b / a, 3) if a and b is not None else None

    result = {
        "benchmark": "soak",
        "nodes": args.nodes,
        "interval_s": args.interval,
        "cycles_ok": end["cycles_ok"],
        "cycles_failed": end["cycles_failed"],
        "equivalent_hours_at_5s": round(end["cycles_ok"] * 5 / 3600, 1),
        "wall_s": end["t_s"],
        "jobs_submitted": end["jobs_submitted"],
        "start": first,
        "middle": mid,
        "end": end,
        "growth": {
            "prioritizer_rss": growth(lambda s: s["prioritizer"]["rss_mib"]),
            "prioritizer_fds": growth(lambda s: s["prioritizer"]["fds"]),
            "prioritizer_python_blocks": growth(lambda s: s["prioritizer"]["python_blocks"]),
            "prioritizer_malloc_used": growth(lambda s: s["prioritizer"]["malloc_used_mib"]),
            "filter_rss": growth(lambda s: s["filter"]["rss_mib"]),
            "filter_fds": growth(lambda s: s["filter"]["fds"]),
            "db_bytes": growth(lambda s: s["db_bytes"]),
            "cycle_mean_s": growth(lambda s: s["cycle_mean_s"]),
        },
        "samples": samples,
    }
    if args.trace_memory and len(snapped) == 2:  # where Python's blocks grew, per process
        result["memory_growth"] = {
            name: memory_growth(snapped[0][name], snapped[1][name], top=12)
            for name in snapped[0]
            if snapped[0][name] and snapped[1].get(name)
        }
    print(json.dumps(result))
    g = result["growth"]
    print(
        f"soak ({args.nodes} nodes, {result['cycles_ok']} cycles at {args.interval} s = "
        f"{result['equivalent_hours_at_5s']} h at 5 s, {result['jobs_submitted']} jobs): "
        f"{result['cycles_failed']} failed cycles; end/start prioritizer RSS {g['prioritizer_rss']}x, fds "
        f"{g['prioritizer_fds']}x; filter RSS {g['filter_rss']}x, fds {g['filter_fds']}x; database "
        f"{g['db_bytes']}x; cycle time {g['cycle_mean_s']}x"
    )
    for name, lines in result.get("memory_growth", {}).items():
        print(f"where {name}'s Python blocks grew from minute {args.snapshot_at:g} to the end:")
        print("\n".join(f"  {line}" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
