"""The prioritizer's idle-allocation policy against a REAL local Slurm (slurm_dl.testbed).

A job sleeps on two GPUs; recorded gpu-agent files in a temp exposition dir say its GPUs sit at
0% with no process. The prioritizer's cycles (in this process, on the live cluster) warn it in
its comment — the user's own comment kept — and then cancel it if it opted in to preemption,
across a restart of the prioritizer between the two (the idle clock comes back from the store); a
job that did not opt in is only deprioritized and keeps running; a dry run only reports. Sample
times are set relative to each cycle, so the idle clock does not depend on how fast this runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from prioritizer import Prioritizer
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.idle.notice import current_note, strip_note
from slurm_dl.slurm import CliBackend
from slurm_dl.store import Store
from slurm_dl.telemetry import exposition
from slurm_dl.telemetry.agent import write_atomically
from slurm_dl.telemetry.samples import JobGpuSample
from slurm_dl.testbed import Testbed, wait_for_job_state

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SLEEPER = "#!/bin/bash\nsleep 600\n"
USER_COMMENT = "experiment 42, keep this text dl:ckpt=1"  # opted in (with --requeue)
PLAIN_COMMENT = "experiment 43, no checkpoint handler"


class RecordedAgents:
    """What the gpu-agents would publish for one job: its GPUs idle, at a chosen sample time."""

    def __init__(
        self, directory: Path, backend: CliBackend, job_id: int, bound_s: float = 60.0
    ) -> None:
        self.directory = directory
        end = time.monotonic() + bound_s
        while not (allocs := [a for a in backend.gpu_allocations() if a.job_id == job_id]):
            if time.monotonic() > end:
                pytest.fail(f"job {job_id} never showed its GPU indices")
            time.sleep(0.2)
        self.allocs = allocs
        self.job_id = job_id

    def publish_idle(self, at: float) -> None:
        for a in self.allocs:
            rows = [
                JobGpuSample(self.job_id, a.node, g, 0.0, 512 << 20, 60.0, 0, at) for g in a.gpus
            ]
            write_atomically(self.directory / f"{a.node}.prom", exposition.render(rows))


def scene(testbed: Testbed, tmp_path: Path, comment: str = USER_COMMENT, **telemetry):
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    t = config.telemetry.model_copy(
        update={
            "exposition_dir": str(tmp_path / "agents"),
            "idle_minutes": 1.0,
            "warn_grace_minutes": 1.0,
            "sample_seconds": 30.0,
            "idle_action": "cancel",
            **telemetry,
        }
    )
    config = config.model_copy(update={"telemetry": t})
    backend = CliBackend(testbed.env())
    requeue = ["--requeue"] if "dl:ckpt=1" in comment else ["--no-requeue"]
    job_id = backend.submit(
        SLEEPER,
        [
            "--gres=gpu:h100:2",
            "-t",
            "10",
            "-J",
            "idle-gpus",
            f"--comment={comment}",
            *requeue,
            f"--output={tmp_path}/idle-%j.out",
        ],
    )
    wait_for_job_state(job_id, testbed.env(), ("RUNNING",), timeout=60)
    agents = RecordedAgents(tmp_path / "agents", backend, job_id)
    store = Store(f"sqlite:///{tmp_path / 'prio.db'}")
    return Prioritizer(config, backend, store), backend, agents, store, job_id


def comment_of(backend: CliBackend, job_id: int) -> str:
    [job] = [j for j in backend.jobs() if j.job_id == job_id]
    return job.comment


def cycle_with_idle_for(
    p: Prioritizer, agents: RecordedAgents, idle_s: float, first: float
) -> None:
    """Publish a sample ``idle_s`` after the first idle sample, then run one cycle."""
    agents.publish_idle(first + idle_s)
    p.run_cycle()


def test_idle_job_is_warned_in_its_comment_then_cancelled(testbed: Testbed, tmp_path: Path) -> None:
    p, backend, agents, store, job_id = scene(testbed, tmp_path)
    try:
        first = time.time() - 120.0  # inside the policy's 3 min sample window
        cycle_with_idle_for(p, agents, 0.0, first)
        assert comment_of(backend, job_id) == USER_COMMENT
        cycle_with_idle_for(p, agents, 70.0, first)  # idle 70 s: past the 1 min limit -> warned
        text = comment_of(backend, job_id)
        assert strip_note(text) == USER_COMMENT, "the user's comment survives"
        assert current_note(text).startswith(
            "GPUs idle 1 min"
        ) and "will be cancelled" in current_note(text)
        assert [d.kind for d in store.decisions(job_id)] == ["idle-warn"]
        p = Prioritizer(
            p.config, backend, Store(store.url)
        )  # the daemon restarts: its sample window is gone
        cycle_with_idle_for(
            p, agents, 100.0, first
        )  # still within the 1 min grace: nothing more, no 2nd warning
        assert [d.kind for d in store.decisions(job_id)] == ["idle-warn"]
        cycle_with_idle_for(p, agents, 130.0, first)  # limit + grace passed -> cancelled
        fields = wait_for_job_state(job_id, testbed.env(), ("CANCELLED",), timeout=60)
        assert fields
        assert [d.kind for d in store.decisions(job_id)] == ["idle-warn", "idle-cancel"]
        assert store.utilisation_summaries()[job_id].action == "cancel"
    finally:
        _cancel(backend, job_id)


def test_idle_job_that_did_not_opt_in_is_deprioritized_never_cancelled(
    testbed: Testbed, tmp_path: Path
) -> None:
    p, backend, agents, store, job_id = scene(testbed, tmp_path, comment=PLAIN_COMMENT)
    try:
        first = time.time() - 120.0
        for idle_s in (0.0, 70.0, 130.0, 160.0):  # past the limit and the grace, as above
            cycle_with_idle_for(p, agents, idle_s, first)
        assert [d.kind for d in store.decisions(job_id) if d.kind.startswith("idle")] == [
            "idle-warn",
            "idle-deprioritize",
        ]
        [acted] = [d for d in store.decisions(job_id) if d.kind == "idle-deprioritize"]
        assert acted.reason.endswith("not cancelled: the job did not opt in to preemption")
        [job] = [j for j in backend.jobs() if j.job_id == job_id]
        assert job.running and job.restarts == 0, "never cancelled nor requeued"
        note = current_note(job.comment)
        assert (
            note.startswith("deprioritized: GPUs idle")
            and "requeue" not in note
            and "cancel" not in note
        )
        assert strip_note(job.comment) == PLAIN_COMMENT
    finally:
        _cancel(backend, job_id)


def test_forged_agent_files_do_not_get_a_running_job_warned_or_cancelled(
    testbed: Testbed, tmp_path: Path
) -> None:
    """Files anyone could have written say the job's GPUs idle: one naming a node the job is not
    on, one named for another node, a world-writable one of the job's own node. Past the limit
    and the grace nothing happens to the job; once the node's file is the agent's (0644), the
    same samples get it warned."""
    p, backend, agents, store, job_id = scene(testbed, tmp_path)
    [node] = {a.node for a in agents.allocs}
    d = agents.directory
    d.mkdir(parents=True, exist_ok=True)

    def forge(at: float) -> None:
        gpus = [g for a in agents.allocs for g in a.gpus]

        def idle(n: str) -> str:
            return exposition.render(
                [JobGpuSample(job_id, n, g, 0.0, 0, 60.0, 0, at) for g in gpus]
            )

        # a node the job is not on, and a file not named for the node it names (both 0644)
        for name, n in (("gpu99", "gpu99"), ("zz-forged", node)):
            (d / f"{name}.prom").write_text(idle(n))
            (d / f"{name}.prom").chmod(0o644)
        (d / f"{node}.prom").write_text(idle(node))
        (d / f"{node}.prom").chmod(0o666)  # the node's own name, but anyone may write it

    try:
        first = time.time() - 120.0
        for idle_s in (0.0, 70.0, 130.0, 160.0):  # past the 1 min limit and the 1 min grace
            forge(first + idle_s)
            p.run_cycle()
        assert not [k for k in (x.kind for x in store.decisions(job_id)) if k.startswith("idle")]
        assert comment_of(backend, job_id) == USER_COMMENT
        [job] = [j for j in backend.jobs() if j.job_id == job_id]
        assert job.running
        cycle_with_idle_for(p, agents, 0.0, first)  # the agent's own file (0644) says the same
        cycle_with_idle_for(p, agents, 70.0, first)
        assert [x.kind for x in store.decisions(job_id)] == ["idle-warn"]
    finally:
        _cancel(backend, job_id)


def test_dry_run_only_reports(testbed: Testbed, tmp_path: Path) -> None:
    p, backend, agents, store, job_id = scene(testbed, tmp_path, dry_run=True)
    try:
        first = time.time() - 120.0  # inside the policy's 3 min sample window
        for idle_s in (0.0, 70.0, 130.0, 160.0):
            cycle_with_idle_for(p, agents, idle_s, first)
        kinds = [d.kind for d in store.decisions(job_id)]
        assert kinds == ["idle-warn", "idle-cancel"]
        assert all("report only" in d.reason for d in store.decisions(job_id))
        assert comment_of(backend, job_id) == USER_COMMENT, "a dry run writes no comment"
        [job] = [j for j in backend.jobs() if j.job_id == job_id]
        assert job.running, "a dry run cancels nothing"
    finally:
        _cancel(backend, job_id)


# Checkpointable: on USR2 it writes a checkpoint and keeps sleeping (the requeue ends it).
CHECKPOINTING = """#!/bin/bash
trap 'echo "USR2 $(date +%s)"' USR2
while true; do sleep 1 & wait $!; done
"""


def test_deprioritized_idle_job_is_requeued_instead_of_the_busy_one(
    make_testbed, tmp_path: Path
) -> None:
    tb = make_testbed(nodes=1, gpus_per_node=4)
    tb.up()
    env = tb.env()
    config = load_config(ROOT / "site-configs" / "testbed.toml")
    t = config.telemetry.model_copy(
        update={
            "exposition_dir": str(tmp_path / "agents"),
            "idle_minutes": 1.0,
            "warn_grace_minutes": 0.5,
            "sample_seconds": 30.0,
            "idle_action": "deprioritize",
        }
    )
    config = config.model_copy(update={"telemetry": t})
    backend = CliBackend(env)
    args = [
        "--requeue",
        "--comment=dl:ckpt=1",
        "--gres=gpu:h100:2",
        "-t",
        "10",
        "--open-mode=append",
    ]
    idle = backend.submit(CHECKPOINTING, [*args, "-J", "idle", f"--output={tmp_path}/idle.out"])
    busy = backend.submit(CHECKPOINTING, [*args, "-J", "busy", f"--output={tmp_path}/busy.out"])
    need = None
    try:
        for j in (busy, idle):
            wait_for_job_state(j, env, ("RUNNING",), timeout=60)
        busy_gpus = RecordedAgents(tmp_path / "agents", backend, busy)
        idle_gpus = RecordedAgents(tmp_path / "agents", backend, idle)
        [node] = {a.node for a in busy_gpus.allocs + idle_gpus.allocs}

        def publish(at: float) -> None:
            rows = [
                JobGpuSample(busy, node, g, 90.0, 30 << 30, 400.0, 1, at)
                for a in busy_gpus.allocs
                for g in a.gpus
            ]
            rows += [
                JobGpuSample(idle, node, g, 0.0, 1 << 20, 60.0, 0, at)
                for a in idle_gpus.allocs
                for g in a.gpus
            ]
            write_atomically(tmp_path / "agents" / f"{node}.prom", exposition.render(rows))

        store = Store(f"sqlite:///{tmp_path / 'prio.db'}")
        p = Prioritizer(config, backend, store)
        publish(time.time() - 130.0)  # idle since over two minutes: past the limit and the grace
        p.run_cycle()
        for _ in range(
            3
        ):  # warned first, then deprioritized, then its SiteFactor goes to the bottom
            publish(time.time())
            p.run_cycle()
        assert [d.kind for d in store.decisions(idle) if d.kind.startswith("idle")] == [
            "idle-warn",
            "idle-deprioritize",
        ]
        assert any(
            d.kind == "priority" and d.value == -config.prioritizer.site_factor_max
            for d in store.decisions(idle)
        )
        need = backend.submit(
            "#!/bin/bash\nsleep 5\n", ["--gres=gpu:h100:2", "-t", "5", "-o", "/dev/null"]
        )
        end = time.monotonic() + 120
        while (
            not store.preemptions(victim=idle)
            or store.preemptions(victim=idle)[0].state != "requeued"
        ):
            assert time.monotonic() < end, f"no requeue of the idle job: {store.preemptions()}"
            assert all(r.victim_job_id == idle for r in store.preemptions()), store.preemptions()
            publish(time.time())
            p.run_cycle()
            time.sleep(1.0)
        assert [(r.need_job_id, r.state) for r in store.preemptions()] == [(need, "requeued")], (
            "only the idle job"
        )
        assert "USR2" in (tmp_path / "idle.out").read_text(), (
            "signalled for its checkpoint before the requeue"
        )
        [again] = [j for j in backend.jobs() if j.job_id == idle]
        assert again.state.value != "CANCELLED" and again.restarts >= 1
        assert [j for j in backend.jobs() if j.job_id == busy][0].running
    finally:
        for j in (busy, idle, need):
            if j is not None:
                _cancel(backend, j)


def _cancel(backend: CliBackend, job_id: int) -> None:
    try:
        backend.cancel(job_id)
    except Exception:  # noqa: BLE001 - already gone
        pass
