"""explain: the factors behind a job's score, as data and as text."""

from pathlib import Path

from slurm_dl.cli.config_file import load_config
import pytest

from slurm_dl.core.explain import explain_job, tier_scores, waiting_reason
from slurm_dl.explain.view import render_explanation
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import Job, JobState
from slurm_dl.core.policy import PolicyContext, get_policy

ROOT = Path(__file__).resolve().parents[2]


def _setup():
    cfg = load_config(ROOT / "site-configs" / "testbed.toml")
    led = Ledger(3600.0)
    runner = Job(1, user="u", account="busy", num_gpus=4, state=JobState.RUNNING, start_time=0.0)
    led.observe([runner], 0.0)
    led.observe([runner], 100.0)
    return cfg, led


def test_explanation_names_each_factor_queue_usage_and_slack():
    cfg, led = _setup()
    policy = get_policy("combined", cfg)
    ctx = PolicyContext(now=100.0, ledger=led, config=cfg, total_gpus=32)
    job = Job(
        2,
        user="v",
        account="busy",
        num_gpus=1,
        submit_time=50.0,
        time_limit=600.0,
        deadline=1000.0,
        attained_gpu_s=30.0,
        executed_s=30.0,
        state_reason="Resources",
    )
    e = explain_job(
        job,
        ctx,
        policy,
        score=0.75,
        site_factor=750000,
        rank=0,
        ranked=2,
        waiting_for=waiting_reason(job, free_gpus=0),
    )
    assert set(e["factors"]) == {"deadline", "class", "las", "fairshare"}
    assert e["factors"]["las"]["queue"] == 1  # 30 s of run time is past the 20 s threshold
    assert e["factors"]["las"]["service"] == "seconds"
    assert e["factors"]["las"]["weight"] == 1.0
    assert 0 < e["factors"]["fairshare"]["factor"] <= 1
    assert e["deadline_slack_s"] == 330.0  # (1000 - 100) - (600 - 30 already run)
    assert e["account_usage_gpu_s"] > 390  # 400 GPU-s, decayed over nothing
    assert e["tiers"] == [["deadline"], ["class"], ["las", "fairshare"]]
    assert tier_scores(e) == pytest.approx(policy.tier_scores(job, ctx), abs=1e-5)
    assert "1 GPU(s); 0 free now" in e["waiting_for"]
    text = render_explanation(
        e, [{"at": 90.0, "kind": "priority", "value": 750000, "reason": "score 0.75"}]
    )
    assert (
        "SiteFactor 750000" in text
        and "las 1 x 0.6667 = 0.6667" in text
        and "6 min to spare" in text
    )
    assert "waiting for:" in text and "priority 750000: score 0.75" in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_waiting_reason_prefers_a_planned_preemption():
    job = Job(3, num_gpus=8, state_reason="Priority")
    assert waiting_reason(job, 0, [7, 5]) == "preemption of job(s) 5, 7 to free GPUs"
    assert "Slurm reason: Dependency" == waiting_reason(Job(4, state_reason="Dependency"), 8)
    assert waiting_reason(Job(5, state=JobState.RUNNING), 0) == ""


def test_explain_cli_reads_the_store(tmp_path):
    import json

    from typer.testing import CliRunner

    from slurm_dl.cli.main import app
    from slurm_dl.store import CycleWrite, Store

    cfg, led = _setup()
    policy = get_policy("combined", cfg)
    ctx = PolicyContext(now=100.0, ledger=led, config=cfg, total_gpus=32)
    job = Job(2, account="busy", num_gpus=1, submit_time=50.0)
    e = explain_job(job, ctx, policy, score=0.5, site_factor=500, rank=0, ranked=1)
    url = f"sqlite:///{tmp_path / 'p.db'}"
    Store(url).save_cycle(
        CycleWrite(
            now=100.0,
            cycle=1,
            ledger=led,
            explanations={2: e},
            decisions=[(2, "priority", 500, "score 0.5000 -> SiteFactor 500")],
        )
    )
    conf = str(ROOT / "site-configs" / "testbed.toml")
    runner = CliRunner()
    r = runner.invoke(app, ["explain", "2", "--json", "--config", conf, "--db", url])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["site_factor"] == 500 and doc["decisions"][0]["kind"] == "priority"
    r = runner.invoke(app, ["explain", "2", "--config", conf, "--db", url])
    # for people by default: place and start, no scheduler internals; --detail has them
    assert r.exit_code == 0 and "place:" in r.stdout and "start:" in r.stdout, r.output
    assert "SiteFactor" not in r.stdout and "tier 1" not in r.stdout and "account -" not in r.stdout
    assert all(len(line) <= 80 for line in r.stdout.splitlines()), r.stdout
    r = runner.invoke(app, ["explain", "2", "--detail", "--config", conf, "--db", url])
    assert r.exit_code == 0 and "SiteFactor 500" in r.stdout and "recent decisions" in r.stdout
    r = runner.invoke(app, ["explain", "99", "--config", conf, "--db", url])
    assert r.exit_code == 1 and "job 99" in r.output
    r = runner.invoke(
        app, ["explain", "2", "--config", conf, "--db", f"sqlite:///{tmp_path / 'none.db'}"]
    )
    assert r.exit_code == 1 and "database cannot be read here" in r.output
    assert all(len(line) <= 80 for line in r.output.splitlines() if "none.db" not in line), r.output


@pytest.mark.parametrize(
    "job, requeue_without_signal, kind, why",
    [
        (
            Job(5, checkpointable=False, requeue=True),
            False,
            "never",
            "declared no checkpoint handler",
        ),
        (Job(5, checkpointable=True, requeue=True), False, "checkpoint", "in its batch script"),
        (
            Job(5, checkpointable=True, requeue=True, signal_target="steps"),
            False,
            "checkpoint",
            "in its steps",
        ),
        (Job(5, checkpointable=True, requeue=False), False, "never", "not requeueable (Requeue=0)"),
        (Job(5, checkpointable=False, requeue=True), True, "requeue", "restart from the beginning"),
        (Job(5, checkpointable=False, requeue=False), True, "never", "not requeueable"),
    ],
)
def test_explain_says_whether_and_how_a_job_may_be_preempted(
    job, requeue_without_signal, kind, why
):
    cfg, led = _setup()
    data = cfg.model_dump(mode="json")
    data["preemption"]["requeue_without_signal"] = requeue_without_signal
    cfg = type(cfg).model_validate(data)
    ctx = PolicyContext(now=100.0, ledger=led, config=cfg, total_gpus=32)
    e = explain_job(
        job,
        ctx,
        get_policy("combined", cfg),
        score=0.5,
        site_factor=None,
        rank=0,
        ranked=1,
    )
    assert e["preemption"]["kind"] == kind and why in e["preemption"]["why"]
    text = render_explanation(e)
    assert "preemption: " in text and why in text


def test_munge_metadata_and_the_endpoint_refuse_what_they_cannot_vouch_for() -> None:
    from prioritizer.explain_server import PATH, ExplainServer
    from slurm_dl.slurm.munge import MungeError, parse_unmunge

    ident = parse_unmunge(
        "STATUS:          Success (0)\nUID:             alice (1001)\nGID:             "
        "users (100)\n"
    )
    assert (ident.uid, ident.gid) == (1001, 100)
    with pytest.raises(MungeError):
        parse_unmunge("STATUS:          Success (0)\n")
    assert (
        PATH.match("/explain/42?live=0")
        and not PATH.match("/explain/42/../1")
        and not PATH.match("/x")
    )
    server = ExplainServer(lambda: None, "127.0.0.1", 0, "/nonexistent/munge.socket")
    try:
        assert server.handle("/explain/1", "").status == 401  # no credential
        assert server.handle("/explain/1", "Basic abc").status == 401  # not MUNGE
        refused = server.handle("/explain/1", "MUNGE MUNGE:xyz:")  # munged cannot vouch
        assert refused.status == 401 and refused.doc["error"]
        assert server.handle("/etc/passwd", "MUNGE x").status == 404
    finally:
        server.close()
