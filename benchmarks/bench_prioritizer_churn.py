"""The prioritizer's memory over many cycles of a queue that turns over, without Slurm.

    python benchmarks/bench_prioritizer_churn.py [--pending 5000] [--running 1000] [--churn 200] [--cycles 1500]

The synthetic queue of ``bench_prioritizer_scoring`` read through the daemon's own parsers
(squeue text, sprio text), with ``--churn`` running jobs ending, as many waiting jobs starting
and as many new jobs arriving each cycle, so that the ledger closes, keeps and forgets jobs and
fills its history to its bounds (20,000 finished jobs and runs, 200,000 history entries) in a
few minutes instead of the days a live soak would need. Cycles run back to back with the
daemon's own garbage-collection pacing (``prioritizer.heap``) and a SQLite store in a
temporary directory.

Every tenth of the run it samples the process's RSS, Python's allocated blocks, glibc's
memory in use and free-but-kept (``mallinfo2``), SQLite's own memory and the ledger's sizes.
Prints one JSON line and one human line; ``rss_growth_ratio`` is the RSS at the end over the
RSS at the second sample (after warm-up; 1.0 = flat). ``--no-trim`` leaves glibc's free
memory in its heap (the daemon before it gave it back): the comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_prioritizer_scoring as base  # noqa: E402
from prioritizer import Prioritizer  # noqa: E402
from prioritizer import heap as heap_mod  # noqa: E402
from prioritizer.heap import Heap  # noqa: E402
from slurm_dl.daemon import process_memory  # noqa: E402
from slurm_dl.cli.config_file import load_config  # noqa: E402
from slurm_dl.core.model import JobState  # noqa: E402
from slurm_dl.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class ChurningSlurm(base.MemorySlurm):
    """``MemorySlurm`` whose queue turns over by ``churn`` jobs at each snapshot."""

    def __init__(self, jobs, nodes, now, churn: int) -> None:
        super().__init__(jobs, nodes, now)
        self.churn = churn
        self.next_id = max(j.job_id for j in jobs) + 1

    def snapshot(self):
        ending = [j for j in self.jobs if j.running][: self.churn]
        starting = {j.job_id for j in [j for j in self.jobs if j.pending][: self.churn]}
        if not ending or not starting:
            return super().snapshot()
        gone = {j.job_id for j in ending}
        template = ending[0]
        jobs, changed = [], []
        for j in self.jobs:
            if j.job_id in gone:
                continue
            if j.job_id in starting:  # starts where an ending job ran
                j = dataclasses.replace(
                    j,
                    state=JobState.RUNNING,
                    state_reason="None",
                    start_time=self.now,
                    nodes=template.nodes,
                    gpu_type=template.gpu_type,
                )
                changed.append(j)
            jobs.append(j)
        waiting = next(j for j in self.jobs if j.pending)
        for _ in range(
            len(ending)
        ):  # new jobs arrive (names repeat: the history's keys are bounded)
            j = dataclasses.replace(
                waiting,
                job_id=self.next_id,
                submit_time=self.now,
                eligible_time=self.now,
                name=f"n{self.next_id % 97}",
            )
            self.next_id += 1
            jobs.append(j)
            changed.append(j)
        self.jobs = jobs
        for jid in gone:
            self.parts.pop(jid, None)
            self.lines.pop(jid, None)
            self.site_factor.pop(jid, None)
        for j in changed:
            head, tail = self.parts[j.job_id] = base.squeue_line(j)
            self.lines[j.job_id] = (
                f"{head}{base.BASE_PRIORITY + self.site_factor.get(j.job_id, 0)}{tail}"
            )
        self.text = self.sprio = None
        return super().snapshot()


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return round(
            next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024, 1
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--running", type=int, default=1000)
    ap.add_argument(
        "--churn", type=int, default=200, help="jobs ending, starting and arriving per cycle"
    )
    ap.add_argument("--cycles", type=int, default=1500)
    ap.add_argument(
        "--no-trim", action="store_true", help="keep glibc's free memory (the comparison)"
    )
    ap.add_argument("--config", default=str(ROOT / "site-configs" / "testbed.toml"))
    ap.add_argument(
        "--census",
        action="store_true",
        help="also count the objects Python's collector tracks, by type, after warm-up and at "
        "the end, and print the types that grew most",
    )
    a = ap.parse_args()
    if a.no_trim:
        heap_mod._TRIM = None
    cfg = load_config(a.config)
    cfg = cfg.model_copy(
        update={"preemption": cfg.preemption.model_copy(update={"enabled": False})}
    )
    jobs, nodes, ledger, now = base.synthetic(a.pending, a.running)
    heap = Heap()
    heap.start()
    samples, failed = [], 0
    censuses: list[Counter] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'ledger.db'}")
        prio = Prioritizer(cfg, ChurningSlurm(jobs, nodes, now, a.churn), store)
        prio.ledger = ledger
        every = max(1, a.cycles // 10)
        for i in range(1, a.cycles + 1):
            try:
                prio.run_cycle()
            except Exception:  # noqa: BLE001 - counted: a soak reports failed cycles, it does not stop
                failed += 1
            heap.after_cycle()
            if i % every == 0 or i == a.cycles:
                led = prio.ledger
                samples.append(
                    {
                        "cycle": i,
                        "rss_mib": _rss_mib(),
                        "py_blocks": sys.getallocatedblocks(),
                        **process_memory.figures(),
                        "ledger_jobs": len(led.jobs),
                        "history": len(led.history),
                        "finished": len(led.finished),
                        "runs": len(led.runs),
                        "elapsed_s": round(time.monotonic() - t0, 1),
                    }
                )
                if a.census and (len(samples) == 2 or i == a.cycles):
                    censuses.append(Counter(type(o).__qualname__ for o in gc.get_objects()))
        store.close()
    heap.release()
    warm, end = samples[min(1, len(samples) - 1)], samples[-1]
    out = {
        "benchmark": "prioritizer_churn",
        "pending": a.pending,
        "running": a.running,
        "churn": a.churn,
        "cycles": a.cycles,
        "trim": not a.no_trim,
        "failed_cycles": failed,
        "jobs_ended": a.churn * a.cycles,
        "rss_growth_ratio": round(end["rss_mib"] / warm["rss_mib"], 3),
        "samples": samples,
    }
    if len(censuses) == 2:
        grew = censuses[1].copy()
        grew.subtract(censuses[0])
        out["census_growth"] = dict(grew.most_common(12))
    print(json.dumps(out))
    print(
        f"{a.cycles} cycles, {a.churn} jobs turning over each, {failed} failed; RSS "
        f"{warm['rss_mib']} MiB at cycle {warm['cycle']} -> {end['rss_mib']} at {end['cycle']} "
        f"(ratio {out['rss_growth_ratio']}); glibc free-but-kept {warm['malloc_free_mib']} -> "
        f"{end['malloc_free_mib']} MiB; history {end['history']}, finished {end['finished']}"
        + ("" if not a.no_trim else " (without giving free memory back)")
    )
    if "census_growth" in out:
        print(
            "objects tracked, growth from warm-up to the end: "
            + ", ".join(f"{k} {v:+d}" for k, v in out["census_growth"].items())
        )
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
