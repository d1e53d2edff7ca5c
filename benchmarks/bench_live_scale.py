"""What slurm-dl does to a real slurmctld under a centre's load: the same load with slurm-dl off
(plain Slurm) and on, side by side, read from Slurm's own ``sdiag``.

    python benchmarks/bench_live_scale.py --nodes 256 --jobs 20000 [--dir /tmp/live-scale]

One testbed directory, started twice with the same size: first with slurm-dl fully off (no
job_submit/lua, no prioritizer, no agent), then on (the filter behind job_submit/lua, the
prioritizer daemon with its metrics and explain endpoints, GPU-agent files for some nodes,
explain requests from several users). Each phase replays the same seeded plan: bursts of job
arrays and single jobs from many users and accounts (``sbatch --uid``), short ``sleep`` jobs so
the queue turns over, users' ``squeue`` polls; ``sdiag -r`` before it, ``sdiag`` every few
seconds during it and at its end.

Prints one JSON line and one human line. ``rpc_time_ratio``: slurmctld's average RPC time with
slurm-dl on over off (submit, job info, all RPCs); ``rpc_count_ratio_per_job``: each RPC type's
count on/off divided by the job count on/off; ``filter_added_ms``: sbatch wall time on minus off
at p50/p99; ``prioritizer``: its live cycle time from its own metrics. Needs root and Slurm.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurm_dl.testbed import Testbed  # noqa: E402
from slurm_dl.testbed.process import MARKER  # noqa: E402

CLI = [sys.executable, "-m", "slurm_dl.cli.main"]
TEMPLATE = REPO / "site-configs" / "testbed.toml"
GPU_SIZES = (
    (1, 0.6),
    (2, 0.25),
    (4, 0.1),
    (8, 0.05),
)  # GPUs per job, share of jobs: 2.0 on average
SUBMIT = "REQUEST_SUBMIT_BATCH_JOB"
JOB_INFO = "REQUEST_JOB_INFO"
USER_INFO = "REQUEST_JOB_USER_INFO"


# -- the plan: the same submissions in both phases --------------------------------------------
@dataclass(frozen=True)
class Submission:
    user: str
    group: str
    account: str
    gpus: int
    seconds: int
    tasks: int  # 1: a single job; more: an array of that many tasks
    ckpt: bool

    def argv(self) -> list[str]:
        array = [f"--array=0-{self.tasks - 1}"] if self.tasks > 1 else []
        ckpt = ["--requeue", "--comment=dl:ckpt=1"] if self.ckpt else []
        return [
            "sbatch",
            "--parsable",
            f"--uid={self.user}",
            f"--gid={self.group}",
            "--chdir=/tmp",
            "--output=/dev/null",
            f"--account={self.account}",
            f"--gres=gpu:{self.gpus}",
            "-t",
            str(max(10, self.seconds // 60 + 2)),
            *array,
            *ckpt,
            "--wrap",
            f"sleep {self.seconds}",
        ]


def local_users(count: int) -> list[tuple[str, str]]:
    """``count`` existing accounts of this machine (user, primary group), system ones included:
    the jobs only sleep in /tmp. Root is left out (its jobs pass the filter's rules untouched)."""
    import grp

    found = []
    for p in sorted(pwd.getpwall(), key=lambda p: p.pw_uid):
        if p.pw_uid == 0:
            continue
        try:
            found.append((p.pw_name, grp.getgrgid(p.pw_gid).gr_name))
        except KeyError:
            continue
    if not found:
        raise SystemExit("error: no user accounts besides root on this machine to submit as")
    return [found[i % len(found)] for i in range(count)]


def make_plan(
    jobs: int,
    users: int,
    accounts: int,
    seed: int,
    array_share: float,
    seconds: tuple[int, int],
    gpus_scale: int = 1,
) -> list[Submission]:
    """Jobs as bursts: each user sends arrays (10 to 500 tasks) and single jobs. ``gpus_scale``
    multiplies every job's GPUs (at most 8): fewer jobs run at once on the same nodes."""
    rng = random.Random(seed)
    people = local_users(users)
    plan: list[Submission] = []
    in_arrays = int(jobs * array_share)
    made = 0

    def one(tasks: int) -> Submission:
        user, group = rng.choice(people)
        gpus = min(
            8, gpus_scale * rng.choices([g for g, _ in GPU_SIZES], [w for _, w in GPU_SIZES])[0]
        )
        return Submission(
            user,
            group,
            f"acct{people.index((user, group)) % accounts}",
            gpus,
            rng.randint(*seconds),
            tasks,
            rng.random() < 0.1,
        )

    while in_arrays - made >= 2:
        tasks = min(rng.randint(10, 500), in_arrays - made)
        plan.append(one(tasks))
        made += tasks
    plan += [one(1) for _ in range(jobs - made)]
    rng.shuffle(plan)
    return plan


# -- sdiag ---------------------------------------------------------------------------------------
_RPC = re.compile(r"^\s+(\S+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)", re.M)
_NUMBER = {
    "server_threads": r"Server thread count:\s+(\d+)",
    "agent_queue": r"Agent queue size:\s+(\d+)",
    "jobs_submitted": r"Jobs submitted:\s+(\d+)",
    "jobs_started": r"Jobs started:\s+(\d+)",
    "jobs_completed": r"Jobs completed:\s+(\d+)",
    "jobs_canceled": r"Jobs canceled:\s+(\d+)",
    "jobs_failed": r"Jobs failed:\s+(\d+)",
}


def parse_sdiag(text: str) -> dict:
    """Counters, and ``{count, total_us}`` per message type (``rpc``) and per user (``rpc_by_user``)."""
    by_type = text.split("statistics by message type", 1)[-1].split("statistics by user", 1)[0]
    by_user = (
        text.split("statistics by user", 1)[-1].split("Pending RPC", 1)[0]
        if "statistics by user" in text
        else ""
    )
    out: dict = {k: int(m.group(1)) if (m := re.search(p, text)) else 0 for k, p in _NUMBER.items()}
    out["rpc"] = {
        m.group(1): {"count": int(m.group(2)), "total_us": int(m.group(4))}
        for m in _RPC.finditer(by_type)
    }
    out["rpc_by_user"] = {
        m.group(1): {"count": int(m.group(2)), "total_us": int(m.group(4))}
        for m in _RPC.finditer(by_user)
    }
    return out


def sdiag(env: dict, reset: bool = False) -> dict:
    if reset:
        subprocess.run(["sdiag", "-r"], env=env, capture_output=True, timeout=60, check=True)
    return parse_sdiag(
        subprocess.run(["sdiag"], env=env, capture_output=True, text=True, timeout=60).stdout
    )


# -- slurm-dl on ---------------------------------------------------------------------------------
class StandInNvml:
    """Constant busy readings behind pynvml's names: the agent's file without a GPU."""

    def __init__(self, gpus: int):
        self.n = gpus
        self._util = SimpleNamespace(gpu=90, memory=40)
        self._mem = SimpleNamespace(used=40 << 30, total=80 << 30, free=40 << 30)

    def nvmlDeviceGetCount(self):
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._util

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._mem

    def nvmlDeviceGetPowerUsage(self, h):
        return 500_000

    def nvmlDeviceGetMinorNumber(self, h):
        return h

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return []

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def site_config(tb: Testbed, nodes: list[str], interval: float, agent_dir: Path) -> Path:
    """DIR/site.toml: the testbed's config with its nodes, the interval for this queue, and the
    agents' directory."""
    from slurm_dl.core.hostlist import compress_hostlist
    from slurm_dl.testbed.site_toml import with_setting

    path = tb.write_site_config(TEMPLATE, replace=True)
    text = path.read_text().replace('nodes = "gpu[01-04]"', f'nodes = "{compress_hostlist(nodes)}"')
    text = with_setting(text, "prioritizer", "interval_seconds", interval)
    text = with_setting(text, "telemetry", "exposition_dir", str(agent_dir))
    path.write_text(text)
    return path


def scrape(port: int) -> dict[str, float]:
    """Prometheus samples summed by name and outcome label."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        )
    except OSError:
        return {}
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + (f"{{{s.labels['outcome']}}}" if "outcome" in s.labels else "")
            out[key] = out.get(key, 0.0) + s.value
    return out


@dataclass
class Services:
    procs: list[subprocess.Popen] = field(default_factory=list)
    prio_port: int = 0
    explain: tuple[str, int, str] | None = None  # host, port, munge socket

    def stop(self) -> None:
        for p in reversed(self.procs):
            stop_proc(p)


def stop_proc(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def start_services(tb: Testbed, env: dict, config: Path, logs: Path) -> Services:
    from slurm_dl.cli.config_file import load_config

    sv = Services(prio_port=free_port())
    sock = tb.layout.filter_socket
    marked = {**env, MARKER: str(tb.state_dir), "SLURM_DL_CONFIG": str(config)}

    def spawn(name: str, argv: list[str]) -> None:
        sv.procs.append(
            subprocess.Popen(
                [*CLI, *argv],
                env=marked,
                stdout=open(logs / f"{name}.log", "ab"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    spawn("filter", ["filter", "serve", "--config", str(config), "--socket", str(sock)])
    wait("the filter socket", sock.exists, 60)
    out = subprocess.run(
        [
            *CLI,
            "filter",
            "install",
            "--config",
            str(config),
            "--slurm-conf-dir",
            str(tb.conf_dir),
            "--socket",
            str(sock),
        ],
        env=marked,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if out.returncode != 0:
        raise SystemExit(f"error: filter install failed: {out.stderr.strip()}")
    time.sleep(1.1)  # slurmctld re-reads job_submit.lua when its mtime changes
    spawn(
        "prioritizer",
        [
            "prioritizer",
            "run",
            "--init",
            "--config",
            str(config),
            "--metrics-port",
            str(sv.prio_port),
        ],
    )
    cfg = load_config(config).prioritizer
    if getattr(cfg, "explain_port", None):
        sv.explain = (cfg.explain_host or "127.0.0.1", int(cfg.explain_port), str(cfg.munge_socket))
    wait(
        "the prioritizer's first cycle",
        lambda: scrape(sv.prio_port).get("slurm_dl_prioritizer_cycles_total{ok}", 0) >= 1,
        300,
    )
    return sv


def wait(what: str, check, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise SystemExit(f"error: {what} did not come within {timeout:.0f} s")
        time.sleep(0.2)


# -- background load: users' squeue, explain requests, agents, sdiag samples ---------------------
class Background:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.counts: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.samples: list[dict] = []

    def every(self, name: str, period: float, fn) -> None:
        def loop() -> None:
            while not self.stop.is_set():
                t0 = time.monotonic()
                try:
                    label = fn()
                    key = f"{name}: {label}" if label else name
                    self.counts[key] = self.counts.get(key, 0) + 1
                except Exception as e:  # noqa: BLE001 - a failed poll is counted, the load goes on
                    why = f"{name}: {getattr(e, 'code', '') or type(e).__name__}"
                    self.failures[why] = self.failures.get(why, 0) + 1
                self.stop.wait(max(0.0, period - (time.monotonic() - t0)))

        t = threading.Thread(target=loop, name=name, daemon=True)
        t.start()
        self.threads.append(t)

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)


def user_squeue(env: dict, people: list[tuple[str, str]], rng: random.Random):
    """A user's ``squeue``, run as that user where this script is root (``runuser``): sdiag's
    table by user then holds the users' squeue apart from root's calls (slurm-dl's daemons and
    this script's own reads)."""
    as_user = os.geteuid() == 0 and shutil.which("runuser") is not None

    def poll() -> (
        None
    ):  # half ask for their own jobs (REQUEST_JOB_USER_INFO), half for all (REQUEST_JOB_INFO)
        user = rng.choice(people)[0]
        mine = ["-u", user] if rng.random() < 0.5 else []
        prefix = ["runuser", "-u", user, "--"] if as_user else []
        subprocess.run(
            [*prefix, "squeue", "-h", *mine], env=env, capture_output=True, timeout=60, check=True
        )

    return poll


def explain_requests(
    sv: Services, jobs_of: dict[str, list[int]], rng: random.Random, latencies: list[float]
):
    host, port, munge_socket = sv.explain

    def ask() -> None:
        users = sorted(u for u, ids in jobs_of.items() if ids)
        if not users:
            return "no job yet"
        user = rng.choice(users)
        job = rng.choice(jobs_of[user])
        cred = subprocess.run(
            ["runuser", "-u", user, "--", "munge", "--no-input", f"--socket={munge_socket}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(
                urllib.request.Request(
                    f"http://{host}:{port}/explain/{job}?live=1",
                    headers={"Authorization": f"MUNGE {cred}"},
                ),
                timeout=30,
            ) as resp:
                resp.read()
        except urllib.error.HTTPError as e:
            if e.code == 404:  # a job the prioritizer has not seen yet: a fair answer
                return "not yet known"
            if e.code == 403:  # the user's own job, refused: counted apart (see the report)
                return "refused 403"
            raise
        finally:
            latencies.append(time.perf_counter() - t0)
        return None

    return ask


def agents(env: dict, nodes: list[str], out_dir: Path):
    """The gpu-agent's sample on each of ``nodes`` (its own Slurm reads each, as on a node:
    ``scontrol listpids`` and single-job reads, the whole queue only as a fallback)."""
    from slurm_dl.slurm import CliBackend
    from slurm_dl.slurm.node_alloc import NodeAllocations
    from slurm_dl.telemetry.agent import sample_once

    backend, nvml = CliBackend(env), StandInNvml(8)
    readers = {node: NodeAllocations(backend.gpu_allocations, env) for node in nodes}

    def sample() -> None:
        for node in nodes:
            sample_once(nvml, node, readers[node], out_dir)

    sample.readers = readers  # type: ignore[attr-defined]
    return sample


# -- one phase -------------------------------------------------------------------------------------
def queue_counts(env: dict) -> dict[str, int]:
    out = subprocess.run(
        ["squeue", "-h", "-r", "-o", "%T"], env=env, capture_output=True, text=True, timeout=120
    ).stdout.split()
    counts: dict[str, int] = {}
    for state in out:
        counts[state] = counts.get(state, 0) + 1
    return counts


def finished(tb: Testbed, active: set[str] = frozenset()) -> dict[str, int]:
    """Jobs that ended, by final state (each job once), from the testbed's jobcomp file; jobs in
    ``active`` (still in the queue, e.g. completing) are left out, so no job counts twice."""
    try:
        text = (tb.layout.log_dir / "jobcomp.txt").read_text(errors="replace")
    except OSError:
        return {}
    last: dict[str, str] = {}
    for m in re.finditer(r"^JobId=(\d+) .*?JobState=(\S+)", text, re.M):
        if m.group(2) not in ("REQUEUED", "PREEMPTED"):
            last[m.group(1)] = m.group(2)
    out: dict[str, int] = {}
    for job, state in last.items():
        if job not in active:
            out[state] = out.get(state, 0) + 1
    return out


ENDED = (
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
)


def accounted(tb: Testbed, env: dict) -> dict:
    """Every job once: still in the queue (array tasks one by one), else ended in the jobcomp log."""
    rows = subprocess.run(
        ["squeue", "-h", "-r", "-o", "%A %T"], env=env, capture_output=True, text=True, timeout=120
    ).stdout.split("\n")
    queued, active_ids = 0, set()
    for row in rows:
        job, _, state = row.strip().partition(" ")
        if job and state not in ENDED:
            queued += 1
            if state != "PENDING":  # a pending array's tasks share one id until they start
                active_ids.add(job)
    ended = finished(tb, active_ids)  # read after the queue: a job ending in between counts once
    return {"in_queue": queued, "finished": sum(ended.values()), "finished_by_state": ended}


def run_phase(on: bool, args, plan: list[Submission], say) -> dict:
    tb = Testbed(args.dir, nodes=args.nodes, gpus_per_node=8, job_submit_lua=on)
    if not all(
        os.stat(p).st_mode & 0o001
        for p in [*Path(tb.state_dir).parents, tb.state_dir]
        if p.exists()
    ):
        raise SystemExit(
            f"error: {tb.state_dir}: every directory above it must be open to other users "
            "(their jobs run from its spool); choose a --dir such as /tmp/live-scale"
        )
    tb.down()
    (tb.layout.log_dir / "jobcomp.txt").unlink(missing_ok=True)
    for db in tb.layout.root.glob("ledger.db*"):  # the prioritizer starts from an empty ledger
        db.unlink()
    shutil.rmtree(tb.layout.state_save_dir, ignore_errors=True)  # a fresh controller each phase
    t0 = time.monotonic()
    tb.up()
    say(
        f"{'on ' if on else 'off'}: testbed of {args.nodes} nodes up in {time.monotonic() - t0:.1f} s"
    )
    env = tb.env()
    logs = Path(args.dir) / ("on" if on else "off")
    logs.mkdir(parents=True, exist_ok=True)
    sv = Services()
    bg = Background()
    rng = random.Random(args.seed + 1)
    people = sorted({(s.user, s.group) for s in plan})
    jobs_of: dict[str, list[int]] = {}
    explain_lat: list[float] = []
    try:
        if on:
            agent_dir = logs / "agent"
            agent_dir.mkdir(exist_ok=True)
            nodes = [f"gpu{i:0{2 if args.nodes <= 99 else 3}d}" for i in range(1, args.nodes + 1)]
            config = site_config(tb, nodes, args.interval, agent_dir)
            sv = start_services(tb, env, config, logs)
        before = sdiag(env, reset=True)
        bg.every("squeue_user", args.squeue_every, user_squeue(env, people, rng))
        bg.every("sdiag", 5.0, lambda: bg.samples.append(sdiag(env)))
        agent_sample = None
        if on:
            agent_sample = agents(env, nodes[: args.agent_nodes], agent_dir)
            bg.every("agent", args.agent_every, agent_sample)
            if sv.explain and shutil.which("runuser") and shutil.which("munge"):
                bg.every(
                    "explain", args.explain_every, explain_requests(sv, jobs_of, rng, explain_lat)
                )
        walls: list[float] = []
        single_walls: list[float] = []
        failed: list[str] = []
        lock = threading.Lock()
        start = time.monotonic()

        def submit(i_s: tuple[int, Submission]) -> None:
            i, s = i_s
            due = start + i / args.rate
            time.sleep(max(0.0, due - time.monotonic()))
            t = time.perf_counter()
            out = subprocess.run(s.argv(), env=env, capture_output=True, text=True, timeout=120)
            wall = time.perf_counter() - t
            with lock:
                walls.append(wall)
                if s.tasks == 1:
                    single_walls.append(wall)
                if out.returncode != 0:
                    failed.append(out.stderr.strip()[-200:])
                else:
                    jobs_of.setdefault(s.user, []).append(int(out.stdout.strip().split(";")[0]))

        with ThreadPoolExecutor(args.submitters) as pool:
            list(pool.map(submit, enumerate(plan)))
        submit_s = time.monotonic() - start
        say(
            f"{'on ' if on else 'off'}: {len(plan)} sbatch calls ({sum(s.tasks for s in plan)} jobs) in {submit_s:.0f} s, "
            f"{len(failed)} failed; steady window {args.window:.0f} s"
        )
        peak = queue_counts(env)
        time.sleep(args.window)
        bg.end()
        after = sdiag(env)  # before this script's own last squeue
        during = queue_counts(env)
        prio = scrape(sv.prio_port) if on else {}
        accounts = accounted(tb, env)
    finally:
        bg.end()
        sv.stop()
        tb.down()
    walls.sort()
    single_walls.sort()
    return {
        "jobs": sum(s.tasks for s in plan),
        "sbatch_calls": len(plan),
        "sbatch_failed": len(failed),
        "sbatch_errors": failed[:3],
        "submit_s": round(submit_s, 1),
        "sbatch_ms": {
            "p50": round(1000 * pct(walls, 50), 2),
            "p99": round(1000 * pct(walls, 99), 2),
        },
        "sbatch_single_ms": {
            "p50": round(1000 * pct(single_walls, 50), 2),
            "p99": round(1000 * pct(single_walls, 99), 2),
            "n": len(single_walls),
        },
        "sdiag_before": {k: v for k, v in before.items() if k != "rpc"},
        "sdiag": after,
        "server_threads_max": max([s["server_threads"] for s in bg.samples] or [0]),
        "agent_queue_max": max([s["agent_queue"] for s in bg.samples] or [0]),
        "queue_after_submit": peak,
        "queue_end": during,
        "accounted": accounts,
        "background": {"ok": bg.counts, "failed": bg.failures},
        "explain_ms": {
            "n": len(explain_lat),
            "p50": round(1000 * pct(sorted(explain_lat), 50), 1),
            "p99": round(1000 * pct(sorted(explain_lat), 99), 1),
        }
        if on
        else None,
        "prioritizer": prioritizer_figures(prio) if on else None,
        "agent_reads": {
            "single_job": sum(r.job_reads for r in agent_sample.readers.values()),
            "whole_queue": sum(r.full_reads for r in agent_sample.readers.values()),
            "listpids_failed": sorted(
                {r.local_error for r in agent_sample.readers.values() if r.local_error}
            ),
        }
        if agent_sample
        else None,
    }


def pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[
        min(len(sorted_values) - 1, int(round(q / 100 * (len(sorted_values) - 1))))
    ]


def prioritizer_figures(m: dict[str, float]) -> dict:
    count = m.get("slurm_dl_prioritizer_cycle_duration_seconds_count", 0.0)
    return {
        "cycles_ok": int(m.get("slurm_dl_prioritizer_cycles_total{ok}", 0)),
        "cycles_failed": int(
            sum(
                v
                for k, v in m.items()
                if k.startswith("slurm_dl_prioritizer_cycles_total{") and not k.endswith("{ok}")
            )
        ),
        "cycle_mean_s": round(
            m.get("slurm_dl_prioritizer_cycle_duration_seconds_sum", 0.0) / count, 3
        )
        if count
        else None,
        "site_factor_pushes": int(m.get("slurm_dl_prioritizer_site_factor_pushes_total", 0)),
        "site_factor_push_calls": int(
            m.get("slurm_dl_prioritizer_site_factor_push_calls_total", 0)
        ),
    }


# -- comparison ------------------------------------------------------------------------------------
def average_us(rpc: dict, types: list[str] | None = None) -> float | None:
    chosen = [v for k, v in rpc.items() if types is None or k in types]
    count = sum(v["count"] for v in chosen)
    return sum(v["total_us"] for v in chosen) / count if count else None


def ratio(a, b) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def same_mix(r_on: dict, r_off: dict) -> float | None:
    """The off phase's RPCs (types seen in both) timed at the on phase's averages, over their own
    time: the overall ratio without the change of mix (more cheap reads, fewer job ends)."""
    both = [t for t in r_off if r_on.get(t, {}).get("count") and r_off[t]["count"]]
    off_us = sum(r_off[t]["total_us"] for t in both)
    on_us = sum(r_off[t]["count"] * r_on[t]["total_us"] / r_on[t]["count"] for t in both)
    return round(on_us / off_us, 3) if off_us else None


def users_average_us(by_user: dict) -> float | None:
    """Average RPC time of every user but root: the users' own ``squeue`` in this load."""
    return average_us({u: v for u, v in by_user.items() if u != "root"})


def compare(off: dict, on: dict) -> dict:
    r_off, r_on = off["sdiag"]["rpc"], on["sdiag"]["rpc"]
    u_off, u_on = off["sdiag"].get("rpc_by_user", {}), on["sdiag"].get("rpc_by_user", {})
    jobs_ratio = on["jobs"] / off["jobs"]
    per_job = {
        t: ratio(r_on.get(t, {}).get("count", 0) / jobs_ratio, r_off[t]["count"])
        if t in r_off
        else None
        for t in sorted(set(r_on) | set(r_off))
    }
    new_types = sorted(t for t in r_on if t not in r_off)
    return {
        "rpc_time_ratio": {
            "submit": ratio(average_us(r_on, [SUBMIT]), average_us(r_off, [SUBMIT])),
            "job_info": ratio(average_us(r_on, [JOB_INFO]), average_us(r_off, [JOB_INFO])),
            "user_job_info": ratio(average_us(r_on, [USER_INFO]), average_us(r_off, [USER_INFO])),
            "users_squeue": ratio(users_average_us(u_on), users_average_us(u_off)),
            "overall": same_mix(r_on, r_off),
            "overall_raw": ratio(average_us(r_on), average_us(r_off)),
        },
        "rpc_avg_us": {
            name: {
                "submit": average_us(r, [SUBMIT]),
                "job_info": average_us(r, [JOB_INFO]),
                "user_job_info": average_us(r, [USER_INFO]),
                "overall": average_us(r),
                "users_squeue": users_average_us(u),
                "root": average_us(u, ["root"]),
            }
            for name, r, u in (("off", r_off, u_off), ("on", r_on, u_on))
        },
        "rpc_count_by_user": {
            name: {k: v["count"] for k, v in u.items()}
            for name, u in (("off", u_off), ("on", u_on))
        },
        "rpc_count_ratio_per_job": per_job,
        "rpc_types_only_on": {t: r_on[t]["count"] for t in new_types},
        # Single-job sbatch calls: an array's wall time grows with its tasks, not with the filter.
        "filter_added_ms": {
            q: round(on["sbatch_single_ms"][q] - off["sbatch_single_ms"][q], 2)
            for q in ("p50", "p99")
        },
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument(
        "--dir", default="/tmp/slurm-dl-live-scale", help="testbed state directory (short path)"
    )
    ap.add_argument("--users", type=int, default=12)
    ap.add_argument("--accounts", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--array-share", type=float, default=0.9, help="share of the jobs submitted in arrays"
    )
    ap.add_argument("--seconds", default="30-120", help="each job's sleep, MIN-MAX seconds")
    ap.add_argument(
        "--gpus-scale",
        type=int,
        default=1,
        help="multiply each job's GPUs (1, 2, 4 …, at most "
        "8 per job): fewer running jobs, for a machine that cannot start as many",
    )
    ap.add_argument("--rate", type=float, default=20.0, help="sbatch calls per second at most")
    ap.add_argument("--submitters", type=int, default=2, help="concurrent sbatch calls")
    ap.add_argument(
        "--window", type=float, default=60.0, help="seconds of steady load after the submissions"
    )
    ap.add_argument(
        "--interval", type=float, default=5.0, help="the prioritizer's interval_seconds"
    )
    ap.add_argument(
        "--squeue-every", type=float, default=2.0, help="a user's squeue every S seconds"
    )
    ap.add_argument(
        "--explain-every", type=float, default=1.0, help="an explain request every S seconds"
    )
    ap.add_argument(
        "--agent-nodes",
        type=int,
        default=2,
        help="nodes whose gpu-agent runs (each reads the queue)",
    )
    ap.add_argument("--agent-every", type=float, default=30.0, help="the agents' sample_seconds")
    ap.add_argument("--quiet", action="store_true")
    return ap


def main() -> int:
    args = parser().parse_args()
    say = (lambda *_: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    result = run(args, say)
    print(json.dumps(result))
    print(human(result))
    return 0


def run(args, say=lambda *_: None) -> dict:
    """Both phases of the scenario ``args`` (from ``parser()``) on one testbed directory."""
    lo, _, hi = args.seconds.partition("-")
    plan = make_plan(
        args.jobs,
        args.users,
        args.accounts,
        args.seed,
        args.array_share,
        (int(lo), int(hi or lo)),
        args.gpus_scale,
    )
    t0 = time.monotonic()
    off = run_phase(False, args, plan, say)
    on = run_phase(True, args, plan, say)
    return {
        "benchmark": "live_scale",
        "nodes": args.nodes,
        "jobs": args.jobs,
        "users": args.users,
        "accounts": args.accounts,
        "sbatch_calls": len(plan),
        "window_s": args.window,
        "agent_nodes": args.agent_nodes,
        "wall_s": round(time.monotonic() - t0, 1),
        **compare(off, on),
        "off": off,
        "on": on,
    }


def human(r: dict) -> str:
    t, f, p = r["rpc_time_ratio"], r["filter_added_ms"], r["on"]["prioritizer"] or {}
    worst = max(
        ((k, v) for k, v in r["rpc_count_ratio_per_job"].items() if v is not None),
        key=lambda kv: kv[1],
        default=("-", None),
    )
    return (
        f"live scale ({r['nodes']} nodes, {r['jobs']} jobs, peak {r['on']['queue_after_submit'].get('PENDING', 0)} "
        f"pending / {r['on']['queue_after_submit'].get('RUNNING', 0)} running with slurm-dl on): "
        f"RPC time on/off submit {t['submit']}x, job info {t['job_info']}x (own jobs {t['user_job_info']}x; "
        f"users' squeue alone {t.get('users_squeue')}x), "
        f"all {t['overall']}x; "
        f"filter adds {f['p50']} ms p50 / {f['p99']} ms p99 per sbatch; busiest RPC type per job "
        f"{worst[0]} {worst[1]}x; prioritizer cycle {p.get('cycle_mean_s')} s mean over "
        f"{p.get('cycles_ok')} cycles, {p.get('cycles_failed')} failed"
    )


if __name__ == "__main__":
    sys.exit(main())
