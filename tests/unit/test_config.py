"""Site configuration: every shipped example loads; bad files name the key path, the value and the rule."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.config import parse_config
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.errors import ConfigError
from slurm_dl.core.model import JobClass

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "site-configs").glob("*.toml"))


def _testbed() -> dict:
    return tomllib.loads((REPO / "site-configs" / "testbed.toml").read_text())


def _problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        parse_config(data, "site.toml")
    return ei.value.problems


def test_there_are_at_least_three_examples() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {"testbed", "university-small", "large-hetero"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_loads(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.total_gpus > 0
    assert set(cfg.classes) == set(JobClass)
    for g in cfg.node_groups:
        assert g.gpu_type in cfg.gpu_type_names


def test_testbed_matches_the_local_cluster() -> None:
    cfg = load_config(REPO / "site-configs" / "testbed.toml")
    assert cfg.total_gpus == 32 and cfg.max_gpus_per_node == 8
    assert cfg.gpu_type_names == ["h100"]
    # short enough to watch LAS demotion and preemption within a minute
    assert cfg.policy.las.thresholds_gpu_s[0] <= 60
    assert cfg.preemption.grace_seconds <= 30


def test_named_class_overrides_merge_with_defaults() -> None:
    cfg = load_config(REPO / "site-configs" / "testbed.toml")
    assert cfg.classes[JobClass.TRAIN].default_time_minutes == 60
    # a field the file does not set keeps its default
    assert cfg.classes[JobClass.TRAIN].preemptible is True
    assert cfg.classes[JobClass.SERVE].preemptible is False


def test_thresholds_out_of_order_name_the_key_and_value() -> None:
    d = _testbed()
    d["policy"]["las"]["thresholds_gpu_s"] = [100, 50]
    (p,) = _problems(d)
    assert p.startswith("policy.las.thresholds_gpu_s: got [100, 50]")
    assert "strictly increasing" in p


@pytest.mark.parametrize("value", [0, -1.5])
def test_non_positive_half_life_is_an_error(value: float) -> None:
    d = _testbed()
    d["policy"]["fairshare"]["half_life_hours"] = value
    (p,) = _problems(d)
    assert p.startswith(f"policy.fairshare.half_life_hours: got {value}")
    assert p.endswith("allowed: a finite number from 0.01 to 87600")


def test_unknown_gpu_type_in_a_node_group() -> None:
    d = _testbed()
    d["node_groups"][0]["gpu_type"] = "a9000"
    (p,) = _problems(d)
    assert "node_groups[0].gpu_type" in p and "'a9000'" in p and "h100" in p


def test_unknown_key_is_an_error_not_ignored() -> None:
    d = _testbed()
    d["preemption"]["grace_secnds"] = 10
    (p,) = _problems(d)
    assert p.startswith("preemption.grace_secnds: unknown key")


def test_several_problems_are_reported_together() -> None:
    d = _testbed()
    d["policy"]["las"]["thresholds_gpu_s"] = []
    d["prioritizer"]["interval_seconds"] = -3
    d["filter"]["failure_mode"] = "maybe"
    probs = _problems(d)
    assert len(probs) == 3
    assert any(p.startswith("filter.failure_mode: got 'maybe'") and "'accept'" in p for p in probs)


def test_usr1_is_refused_for_preemption() -> None:
    d = _testbed()
    d["preemption"]["signal"] = "USR1"
    (p,) = _problems(d)
    assert "NCCL" in p


def test_filter_timeout_cannot_exceed_200ms() -> None:
    d = _testbed()
    d["filter"]["timeout_ms"] = 1000
    (p,) = _problems(d)
    assert p.startswith("filter.timeout_ms: got 1000")


def test_default_time_over_max_for_a_class() -> None:
    d = _testbed()
    d["classes"]["train"] = {"default_time_minutes": 600, "max_time_minutes": 60}
    (p,) = _problems(d)
    assert p.startswith("classes.train") and "exceeds max_time_minutes" in p


def test_unknown_job_class_is_an_error() -> None:
    d = _testbed()
    d["classes"]["batchy"] = {"weight": 2.0}
    probs = _problems(d)
    assert any("classes.batchy" in p for p in probs)


def test_combined_component_in_two_tiers() -> None:
    d = _testbed()
    d["policy"]["combined"]["tiers"] = [["las"], ["las", "fairshare"]]
    (p,) = _problems(d)
    assert "more than one tier" in p


def test_bad_hostlist() -> None:
    d = _testbed()
    d["node_groups"][0]["nodes"] = "gpu[04-01]"
    (p,) = _problems(d)
    assert p.startswith("node_groups[0].nodes") and "descending range" in p


def test_topology_from_config_must_name_known_nodes(tmp_path: Path) -> None:
    d = tomllib.loads((REPO / "site-configs" / "university-small.toml").read_text())
    d["topology"]["switches"][0]["nodes"] = "zz[1-2]"
    (p,) = _problems(d)
    assert "topology.switches[0].nodes" in p and "zz1" in p


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[site\nname = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_config_check_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["config", "check", str(REPO / "site-configs" / "testbed.toml")])
    assert ok.exit_code == 0 and "OK" in ok.output and "32 GPUs" in ok.output
    bad = tmp_path / "bad.toml"
    d = (
        (REPO / "site-configs" / "testbed.toml")
        .read_text()
        .replace("half_life_hours = 1.0", "half_life_hours = 0")
    )
    bad.write_text(d)
    res = runner.invoke(app, ["config", "check", str(bad)])
    assert res.exit_code == 1
    assert "policy.fairshare.half_life_hours: got 0" in res.output
    assert "Traceback" not in res.output


def test_gittins_prior_file_is_read_at_load_time_relative_to_the_config(tmp_path: Path) -> None:
    from slurm_dl.core.policy import get_policy

    text = (REPO / "site-configs" / "large-hetero.toml").read_text()
    site = tmp_path / "site.toml"
    site.write_text(text.replace('prior = "tiresias"', 'prior = "prior.csv"'))
    with pytest.raises(ConfigError) as ei:
        load_config(site)
    (p,) = ei.value.problems
    assert (
        p.startswith("policy.gittins.prior: got 'prior.csv'; cannot read")
        and "allowed: 'tiresias'" in p
    )
    (tmp_path / "prior.csv").write_text("duration,x\n30,a\n600,b\n\n7200,c\n")
    cfg = load_config(site)
    assert cfg.policy.gittins.prior_samples == (30.0, 600.0, 7200.0)
    assert get_policy("gittins", cfg) and get_policy(
        "combined", cfg
    )  # the prioritizer's policies build
    (tmp_path / "prior.csv").write_text("duration\n30\ninf\n")
    with pytest.raises(
        ConfigError, match=r"policy.gittins.prior: .*line 3: duration 'inf' is outside"
    ):
        load_config(site)


def test_config_check_warns_when_jobs_without_a_handler_may_be_requeued(tmp_path) -> None:
    from slurm_dl.cli.main import app

    text = (REPO / "site-configs" / "testbed.toml").read_text()
    assert "[preemption]\nenabled = true\n" in text
    f = tmp_path / "site.toml"
    f.write_text(
        text.replace(
            "[preemption]\nenabled = true\n",
            "[preemption]\nenabled = true\nrequeue_without_signal = true\n",
        )
    )
    result = CliRunner().invoke(app, ["config", "check", str(f)])
    assert result.exit_code == 0
    assert "warning: preemption.requeue_without_signal = true" in result.output
    assert all(len(line) <= 80 for line in result.output.splitlines() if "OK" not in line)
    plain = CliRunner().invoke(
        app, ["config", "check", str(REPO / "site-configs" / "testbed.toml")]
    )
    assert plain.exit_code == 0 and "requeue_without_signal" not in plain.output


def _sharing(d: dict, **group) -> dict:
    d["sharing"] = {"groups": [{"node_group": d["node_groups"][0]["name"], **group}]}
    return d


def test_sharing_on_a_node_group_that_has_no_gpus_is_one_clear_error() -> None:
    d = _sharing(_testbed(), shards_per_gpu=4)
    d["sharing"]["groups"][0]["node_group"] = "login"
    (p,) = _problems(d)
    assert p.startswith("sharing.groups[0].node_group: got 'login': no node group with GPUs")
    assert "got {" not in p  # the key and value, not the whole file


@pytest.mark.parametrize("count", [0, 10_000])
def test_a_share_count_of_0_or_10000_is_one_clear_error(count: int) -> None:
    (p,) = _problems(_sharing(_testbed(), shards_per_gpu=count))
    assert (
        p == f"sharing.groups[0].shards_per_gpu: got {count}; allowed: a whole number from 1 to 128"
    )


def test_an_mps_share_over_100_percent_is_one_clear_error() -> None:
    (p,) = _problems(_sharing(_testbed(), mps_percent=150))
    assert p.startswith("sharing.groups[0].mps_percent: got 150;") and "at most 100" in p


def test_sharing_needs_shards_or_mps_names_each_group_once_and_never_training() -> None:
    (p,) = _problems(_sharing(_testbed()))
    assert "set shards_per_gpu and/or mps_percent" in p
    d = _sharing(_testbed(), shards_per_gpu=2)
    d["sharing"]["groups"].append(dict(d["sharing"]["groups"][0]))
    (p,) = _problems(d)
    assert p.startswith("sharing.groups[1].node_group:") and "named twice" in p
    d = _sharing(_testbed(), shards_per_gpu=2)
    d["sharing"]["classes"] = ["inference", "train"]
    (p,) = _problems(d)
    assert p.startswith("sharing.classes:") and "train cannot share GPUs" in p


def test_a_valid_sharing_section_loads() -> None:
    cfg = parse_config(
        _sharing(_testbed(), shards_per_gpu=8, mps_percent=50, shard_memory_gb=1), "site.toml"
    )
    g = cfg.sharing.groups[0]
    assert (g.shards_per_gpu, g.mps_percent, g.shard_memory_gb) == (8, 50, 1)
    assert cfg.sharing.classes == [JobClass.INFERENCE, JobClass.INTERACTIVE]


def test_shards_that_promise_more_memory_than_the_gpu_has() -> None:
    (p,) = _problems(_sharing(_testbed(), shards_per_gpu=8, shard_memory_gb=20))
    assert p == "sharing.groups[0].shard_memory_gb: 20 GB x 8 shards is more than a h100's 80 GB"
