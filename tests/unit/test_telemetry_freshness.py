"""Stale gpu-agent files: the one limit on a sample's age, the prioritizer saying (once, in its
log, and in its metrics) that idle detection has no fresh samples, and explain showing how old
a job's newest sample is. Real exposition files, the real cycle on the in-memory cluster."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from prioritizer import Prioritizer
from prioritizer.metrics import PrioritizerMetrics
from slurm_dl.core.config import TelemetryConfig
from slurm_dl.core.explain import sample_age_lines
from slurm_dl.core.idle.freshness import (
    age_words,
    freshness,
    job_sampled_at,
    stale_after_seconds,
)
from slurm_dl.cli.doctor_cmd import _telemetry as gather_telemetry
from slurm_dl.core.doctor import Facts, diagnose
from slurm_dl.core.samples import JobGpuSample
from slurm_dl.telemetry import exposition
from slurm_dl.telemetry.agent import write_atomically
from slurm_dl.explain.view import explain_text, explain_view, people_text
from test_telemetry_prioritizer import agent_writes, scene


def sample(node: str, t: float, job: int = 1, gpu: int = 0) -> JobGpuSample:
    return JobGpuSample(job, node, gpu, 50.0, 1 << 30, 100.0, 1, t)


def test_the_limit_is_three_sample_periods_and_at_least_two_minutes() -> None:
    assert stale_after_seconds(TelemetryConfig()) == 120.0  # 30 s samples
    assert stale_after_seconds(TelemetryConfig(sample_seconds=10)) == 120.0
    assert stale_after_seconds(TelemetryConfig(sample_seconds=60)) == 180.0


def test_each_nodes_newest_sample_against_the_limit() -> None:
    samples = [sample("gpu01", 900.0), sample("gpu01", 990.0), sample("gpu02", 700.0)]
    f = freshness(samples, 1000.0, TelemetryConfig())
    assert f.ages == {"gpu01": 10.0, "gpu02": 300.0}
    assert f.stale == ["gpu02"] and f.fresh == ["gpu01"]
    ahead = freshness([sample("gpu03", 1100.0)], 1000.0, TelemetryConfig())
    assert ahead.ages == {"gpu03": 0.0} and ahead.fresh == ["gpu03"], "a clock ahead is not stale"
    assert freshness([], 1000.0, TelemetryConfig()).fresh == []


def test_a_job_is_as_old_as_its_least_recently_sampled_gpu() -> None:
    samples = [
        sample("gpu01", 990.0, gpu=0),
        sample("gpu01", 800.0, gpu=1),  # this GPU's file line stopped moving
        sample("gpu01", 700.0, gpu=1),
        sample("gpu01", 995.0, job=2),
        sample("gpu01", 999.0, job=0),  # no job held it
    ]
    assert job_sampled_at(samples) == {1: 800.0, 2: 995.0}


def test_age_words() -> None:
    assert [age_words(s) for s in (40, 120, 14 * 60, 3 * 3600)] == [
        "40 s",
        "2 min",
        "14 min",
        "3 h",
    ]


def run_cycles(p, c, minutes: int, agents: Path | None = None):
    reports = []
    for _ in range(minutes):
        if agents is not None:
            agent_writes(agents, c.now)
        reports.append(p.run_cycle())
        c.now += 60
    return reports


def test_prioritizer_says_once_that_idle_detection_has_no_fresh_samples(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, c, store = scene(tmp_path)
    p = Prioritizer(config, c, store)
    agents = tmp_path / "agents"
    m = PrioritizerMetrics()
    with caplog.at_level(logging.INFO, logger="slurm_dl.prioritizer"):
        for r in run_cycles(p, c, 3, agents):
            m.observe(r)
        assert m.registry.get_sample_value("slurm_dl_prioritizer_telemetry_fresh_nodes") == 1
        assert m.registry.get_sample_value("slurm_dl_prioritizer_telemetry_stale_nodes") == 0
        fresh = explain_view(store.explanation(2), now=c.now)
        assert "GPU samples: the newest is 60 s old" in people_text(fresh), people_text(fresh)
        assert "too old" not in people_text(fresh)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

        for r in run_cycles(p, c, 6):  # the agent stops writing; its file stays
            m.observe(r)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    blind = [w for w in warnings if "idle detection is off" in w]
    assert len(blind) == 1, warnings  # once, not every cycle
    assert "no gpu-agent sample newer than 2 min" in blind[0] and str(agents) in blind[0]
    stale = [w for w in warnings if "gpu01.prom" in w]
    assert len(stale) == 1 and "is the gpu-agent on gpu01 running?" in stale[0], warnings
    g = m.registry.get_sample_value
    assert g("slurm_dl_prioritizer_telemetry_fresh_nodes") == 0
    assert g("slurm_dl_prioritizer_telemetry_stale_nodes") == 1
    assert g("slurm_dl_prioritizer_telemetry_stale_after_seconds") == 120
    assert g("slurm_dl_prioritizer_telemetry_sample_age_seconds", {"node": "gpu01"}) == 6 * 60
    view = explain_view(store.explanation(2), now=c.now)
    for text in (people_text(view), explain_text(view)):
        assert "GPU samples: the newest is 7 min old, too old to use (over 2 min):" in text, text
        assert "its idle time is not counted" in text
        assert all(len(line) <= 80 for line in text.splitlines()), text

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="slurm_dl.prioritizer"):
        for r in run_cycles(p, c, 2, agents):
            m.observe(r)
    said = [r.getMessage() for r in caplog.records]
    assert any("idle detection resumes" in s for s in said), said
    assert any("fresh samples again from gpu01" in s for s in said), said
    assert g("slurm_dl_prioritizer_telemetry_fresh_nodes") == 1


def test_without_telemetry_the_freshness_series_read_zero(tmp_path: Path) -> None:
    config, c, store = scene(tmp_path, exposition_dir=None)
    m = PrioritizerMetrics()
    [r] = run_cycles(Prioritizer(config, c, store), c, 1)
    assert r.telemetry_ages is None
    m.observe(r)
    assert m.registry.get_sample_value("slurm_dl_prioritizer_telemetry_stale_after_seconds") == 0
    assert m.registry.get_sample_value("slurm_dl_prioritizer_telemetry_stale_nodes") == 0


def test_sample_age_lines_need_the_viewers_clock() -> None:
    assert sample_age_lines({"sampled_at": 100.0, "stale_after_s": 120.0}) == []
    assert sample_age_lines({"sample_age_s": 30.0, "stale_after_s": 120.0}) == [
        "  GPU samples: the newest is 30 s old"
    ]
    lines = sample_age_lines({"sample_age_s": 3 * 3600, "stale_after_s": 120.0})
    assert lines[0].endswith("3 h old, too old to use (over 2 min):")
    assert all(len(line) <= 80 for line in lines)


def agents_at(tmp_path: Path, **written_at: float) -> Path:
    """An exposition directory (0755) with one agent file per node, its samples taken at the
    time given for that node."""
    agents = tmp_path / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    agents.chmod(0o755)
    for node, at in written_at.items():
        rows = [JobGpuSample(1, node, g, 40.0, 1 << 30, 200.0, 1, at) for g in (0, 1)]
        write_atomically(agents / f"{node}.prom", exposition.render(rows))
    return agents


def doctor_samples(agents: Path, now: float, **telemetry) -> list:
    f = Facts(config_path="site.toml", now=now)
    gather_telemetry(f, TelemetryConfig(exposition_dir=str(agents), **telemetry))
    assert [x for x in diagnose(f) if x.check == "gpu-agent files"][0].status == "ok"
    return [x for x in diagnose(f) if x.check == "gpu-agent samples"]


def test_doctor_names_each_stale_agent_file_against_the_prioritizers_limit(tmp_path: Path) -> None:
    now = 100_000.0
    agents = agents_at(tmp_path, gpu01=now - 30, gpu02=now - 900)
    [stale] = doctor_samples(agents, now)
    path = agents / "gpu02.prom"
    assert stale.status == "warn" and stale.detail.startswith(f"{path}: newest sample 15 min old")
    assert "over the 2 min the prioritizer accepts" in stale.detail
    assert "on gpu02: systemctl status slurm-dl-gpu-agent" in stale.fix
    assert f"rm {path}" in stale.fix
    # a slower agent: the limit follows [telemetry] sample_seconds (3 periods)
    [ok] = doctor_samples(agents, now, sample_seconds=600)
    assert ok.status == "ok" and "newer than 30 min" in ok.detail, ok


def test_doctor_fails_when_no_agent_file_is_fresh(tmp_path: Path) -> None:
    now = 100_000.0
    agents = agents_at(tmp_path, gpu01=now - 3600, gpu02=now - 7200)
    found = doctor_samples(agents, now)
    assert [x.status for x in found] == ["fail", "fail", "fail"], found
    assert "idle detection is off" in found[-1].detail
    assert "systemctl enable --now slurm-dl-gpu-agent" in found[-1].fix
    empty = agents_at(tmp_path / "other")
    [none] = doctor_samples(empty, now)
    assert none.status == "warn" and "no agent has written a sample" in none.detail
    [ok] = doctor_samples(agents_at(tmp_path / "fresh", gpu01=now - 5), now)
    assert ok.status == "ok" and "each of 1 file(s) has a sample newer than 2 min" in ok.detail
