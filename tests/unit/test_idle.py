"""The idle-allocation policy on recorded per-GPU job samples."""

from __future__ import annotations

import ast
from pathlib import Path

from slurm_dl.core.config import TelemetryConfig
from slurm_dl.core.idle.decide import Verdict, decide, idle_span
from slurm_dl.core.model import Job, JobClass, JobState
from slurm_dl.telemetry.samples import JobGpuSample

MIN = 60.0
CFG = TelemetryConfig(
    idle_util_percent=2.0, idle_minutes=60, warn_grace_minutes=30, idle_action="cancel"
)


def series(
    job: int, node: str, gpu: int, readings: list[tuple[float, float, int]]
) -> list[JobGpuSample]:
    """(minute, util %, processes) readings of one GPU."""
    return [JobGpuSample(job, node, gpu, u, 1 << 30, 80.0, p, m * MIN) for m, u, p in readings]


def job(job_id: int, gpus: int, cls: JobClass = JobClass.TRAIN) -> Job:
    return Job(job_id=job_id, num_gpus=gpus, job_class=cls, state=JobState.RUNNING)


def busy_then_idle(
    job_id: int, idle_from: int, until: int, gpu: int = 0, node: str = "gpu01"
) -> list[JobGpuSample]:
    return series(
        job_id,
        node,
        gpu,
        [
            (m, 95.0 if m < idle_from else 0.0, 1 if m < idle_from else 0)
            for m in range(0, until + 1, 5)
        ],
    )


def verdict_of(samples, jobs, cfg=CFG):
    [d] = decide(samples, {j.job_id: j for j in jobs}, cfg)
    return d


def test_busy_then_idle_escalates_warn_then_action() -> None:
    j = job(1, 1)
    assert verdict_of(busy_then_idle(1, 100, 130), [j]).verdict is Verdict.OK  # idle 30 min
    d = verdict_of(busy_then_idle(1, 100, 170), [j])  # idle 70 min
    assert d.verdict is Verdict.WARN and d.enforce and round(d.idle_minutes) == 70
    d = verdict_of(busy_then_idle(1, 100, 200), [j])  # idle 100 min
    assert d.verdict is Verdict.CANCEL and "60 min" in d.reason
    depri = CFG.model_copy(update={"idle_action": "deprioritize"})
    assert verdict_of(busy_then_idle(1, 100, 200), [j], depri).verdict is Verdict.DEPRIORITIZE


def test_busy_again_resets_the_idle_clock() -> None:
    s = series(1, "gpu01", 0, [(0, 0.0, 0), (90, 0.0, 0), (95, 50.0, 1), (100, 0.0, 0)])
    d = verdict_of(s, [job(1, 1)])
    assert d.verdict is Verdict.OK and round(d.idle_minutes) == 0


def test_gpu_with_no_process_but_busy_or_process_but_idle_is_not_idle() -> None:
    # utilisation without a visible process (e.g. another PID namespace): busy
    no_proc_busy = series(2, "gpu01", 0, [(m, 80.0, 0) for m in range(0, 200, 10)])
    # a process holding the GPU with 0% (loading data, debugging): not idle by the rule
    proc_idle = series(3, "gpu01", 1, [(m, 0.0, 1) for m in range(0, 200, 10)])
    ds = decide(no_proc_busy + proc_idle, {2: job(2, 1), 3: job(3, 1)}, CFG)
    assert [(d.job_id, d.verdict) for d in ds] == [(2, Verdict.OK), (3, Verdict.OK)]


def test_gpu_allocated_with_no_process_at_all_is_idle() -> None:
    s = series(4, "gpu01", 0, [(m, 0.0, 0) for m in range(0, 121, 10)])
    d = verdict_of(s, [job(4, 1)])
    assert d.verdict is Verdict.CANCEL and round(d.idle_minutes) == 120


def test_multi_node_job_is_idle_only_when_every_gpu_on_every_node_is() -> None:
    idle_a = busy_then_idle(5, 0, 120, gpu=0, node="gpu01") + busy_then_idle(
        5, 0, 120, gpu=1, node="gpu01"
    )
    idle_b = busy_then_idle(5, 0, 120, gpu=0, node="gpu02")
    busy_b = busy_then_idle(5, 200, 120, gpu=1, node="gpu02")  # still busy
    j = job(5, 4)
    assert verdict_of(idle_a + idle_b + busy_b, [j]).verdict is Verdict.OK
    late_b = busy_then_idle(5, 60, 120, gpu=1, node="gpu02")  # went idle an hour later
    d = verdict_of(idle_a + idle_b + late_b, [j])
    assert d.verdict is Verdict.WARN and round(d.idle_minutes) == 60


def test_missing_node_samples_are_not_evidence_of_idleness() -> None:
    only_one_node = busy_then_idle(6, 0, 200, gpu=0, node="gpu01")
    d = verdict_of(only_one_node, [job(6, 2)])
    assert d.verdict is Verdict.OK and "1 of 2 GPUs" in d.reason


def test_idle_time_stops_at_the_oldest_latest_sample() -> None:
    a = busy_then_idle(7, 0, 200, gpu=0)
    b = busy_then_idle(7, 0, 50, gpu=1)  # this GPU's agent went quiet at minute 50
    since, end, seen = idle_span(a + b, 2.0)
    assert (since, end, seen) == (0.0, 50 * MIN, 2)


def test_interactive_jobs_use_their_own_limit() -> None:
    s = busy_then_idle(8, 0, 300)
    j = job(8, 1, JobClass.INTERACTIVE)
    d = verdict_of(s, [j])
    assert d.verdict is Verdict.OK and "interactive" in d.reason
    own = CFG.model_copy(update={"interactive_idle_minutes": 280.0})  # idle 300: warned, in grace
    assert verdict_of(s, [j], own).verdict is Verdict.WARN
    d = verdict_of(
        busy_then_idle(8, 0, 280), [j], own.model_copy(update={"interactive_idle_minutes": 20.0})
    )
    # interactive jobs are not preemptible by default: past the limit they are deprioritized, never cancelled
    assert d.verdict is Verdict.DEPRIORITIZE and not d.opted_in and "did not opt in" in d.reason


def test_cancel_applies_only_to_jobs_that_opted_in_to_preemption() -> None:
    """slurm-dl never cancels a job that did not opt in: past the grace such a job is deprioritized
    (its priority only; the preemption planner never picks it) and the notes say so."""
    idle = busy_then_idle(9, 0, 200)  # idle 200 min: past limit 60 + grace 30
    opted = job(9, 1)
    opted.checkpointable, opted.requeue = True, True
    d = verdict_of(idle, [opted])
    assert d.verdict is Verdict.CANCEL and d.opted_in
    plain = job(9, 1)
    plain.checkpointable = False  # no dl:ckpt declaration
    d = verdict_of(idle, [plain])
    assert d.verdict is Verdict.DEPRIORITIZE and not d.opted_in
    assert d.reason.endswith("not cancelled: the job did not opt in to preemption")
    no_requeue = job(9, 1)
    no_requeue.requeue = False  # declared a handler but asked --no-requeue
    assert verdict_of(idle, [no_requeue]).verdict is Verdict.DEPRIORITIZE
    from slurm_dl.core.idle.notice import action_note, warning_note

    warned = verdict_of(busy_then_idle(9, 0, 70), [plain])
    assert warned.verdict is Verdict.WARN and not warned.opted_in
    assert warning_note(warned, CFG).endswith("its priority will be lowered")
    assert "cancel" not in warning_note(warned, CFG) and "requeue" not in warning_note(warned, CFG)
    assert action_note(d).startswith("deprioritized:") and "requeue" not in action_note(d)


def test_dry_run_and_report_never_enforce() -> None:
    s, j = busy_then_idle(9, 0, 200), [job(9, 1)]
    d = verdict_of(s, j, CFG.model_copy(update={"dry_run": True}))
    assert d.verdict is Verdict.CANCEL and not d.enforce
    d = verdict_of(s, j, CFG.model_copy(update={"idle_action": "report"}))
    assert d.verdict is Verdict.WARN and not d.enforce
    d = verdict_of(s, j, CFG.model_copy(update={"idle_action": "warn"}))
    assert d.verdict is Verdict.WARN and d.enforce


def test_jobs_without_samples_or_unknown_jobs_get_no_decision() -> None:
    s = busy_then_idle(10, 0, 200) + busy_then_idle(0, 0, 200, gpu=3)  # job 0: unallocated GPU
    assert decide(s, {11: job(11, 1)}, CFG) == []
    assert [d.job_id for d in decide(s, {10: job(10, 1), 11: job(11, 1)}, CFG)] == [10]


def test_decisions_are_deterministic_in_sample_order() -> None:
    s = busy_then_idle(1, 10, 200) + busy_then_idle(2, 150, 200, gpu=1)
    jobs = {1: job(1, 1), 2: job(2, 1)}
    assert decide(s, jobs, CFG) == decide(list(reversed(s)), jobs, CFG)


def test_idle_module_is_pure() -> None:
    src = (
        Path(__file__).resolve().parents[2] / "slurm_dl" / "core" / "idle" / "decide.py"
    ).read_text()
    imported = {
        a.name.split(".")[0]
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.Import)
        for a in n.names
    }
    imported |= {
        n.module.split(".")[0]
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module
    }
    assert not imported & {"subprocess", "socket", "time", "os", "pynvml", "sqlmodel"}
    assert "time.time(" not in src and "datetime.now(" not in src
