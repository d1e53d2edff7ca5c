"""A job's own GPU shards count as GPUs (``ceil(K / shards_per_gpu)`` on each node) in the
filter's tag, the class quotas and caps, and the prioritizer's ledger, fair share and class
demotions; a shard request no node can serve (a whole GPU's shards or more, a count no one can
read, shards per job, shards and GPUs together, no sharing group where it may run) is refused
with the fix; an absurd ``dl:gpu_mem`` is refused instead of read as one shard."""

from __future__ import annotations

from pathlib import Path

import pytest

from prioritizer.jobs import apply_tags, class_demotions
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.model import Job, JobClass, JobState
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.live import live_counts
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16
from slurm_dl.core.tags import parse_tag

from test_rules_share import cfg  # noqa: F401 - the testbed config with 8 shards per h100 (a fixture)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mixed():
    return load_config(REPO / "site-configs" / "testbed-mixed.toml")


def run(cfg, held=None, **fields):
    base = {
        "user_name": "alice",
        "user_id": 1000,
        "time_limit": 30,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "req_switch": NO_VAL,
        "wait4switch": NO_VAL,
        "has_script": False,
    }
    return decide(
        {**base, **fields}, cfg, FilterContext(now=1_800_000_000.0, user_class_gpus=held or {})
    )


def tag_of(d):
    return parse_tag(d.changes["admin_comment"])


@pytest.mark.parametrize("k", [1, 2, 7])
def test_fewer_shards_than_a_gpu_has_count_as_one_gpu_in_the_tag(cfg, k):
    d = run(cfg, tres_per_node=f"gres:shard:{k}")
    assert d.accepted and d.job_class is JobClass.INTERACTIVE, d.message
    t = tag_of(d)
    assert t.gpus == 1 and t.shards == (k, 8)


def test_shards_on_two_nodes_count_as_two_gpus(cfg):
    d = run(
        cfg, tres_per_node="gres/shard:3", min_nodes=2, max_nodes=2, comment="dl:class=inference"
    )
    assert d.accepted and tag_of(d).gpus == 2


@pytest.mark.parametrize(
    "ask, words",
    [
        ("gres:shard:8", "all the shards of one GPU"),
        ("gres:shard:32", "more shards than one GPU's 8"),
        ("gres:shard:99999", "more shards than one GPU's 8"),
    ],
)
def test_a_gpus_worth_of_shards_or_more_is_refused_with_the_whole_gpu_fix(cfg, ask, words):
    d = run(cfg, tres_per_node=ask)
    assert not d.accepted and d.rule == "validate.shards"
    assert (
        words in d.message
        and "a job's shards on a node come from one GPU, which has 8 here" in d.message
    )
    k = int(ask.rsplit(":", 1)[1])
    assert f"Fix: --gpus={-(-k // 8)} for whole GPUs, or at most 7 shards." in d.message


@pytest.mark.parametrize(
    "fields, words",
    [
        (
            dict(tres_per_node="gres:shard:12345678901234"),
            "cannot read the GPU shard request 'shard:12345678901234'",
        ),
        (dict(tres_per_node="gres:shard:x:y:z"), "cannot read the GPU shard request"),
        (dict(tres_per_job="gres:shard:2"), "GPU shards are asked per node"),
        (dict(tres_per_node="gres:shard:2,gres:gpu:1"), "whole GPUs or for GPU shards, not both"),
        (
            dict(tres_per_node="gres:shard:2", partition="cpu"),
            "no node offers GPU shards for this job",
        ),
    ],
)
def test_shard_requests_no_node_can_serve_are_refused(cfg, fields, words):
    d = run(cfg, **fields)
    assert not d.accepted and words in d.message, d.message
    assert "Traceback" not in d.message and len(d.message) < 400


def test_per_task_shards_count_on_the_node_they_share(cfg):
    d = run(cfg, tres_per_task="gres/shard:2", num_tasks=4, ntasks_per_node=4)
    assert not d.accepted and "8 shards per node: all the shards of one GPU" in d.message
    d = run(cfg, tres_per_task="gres/shard:2", num_tasks=2, ntasks_per_node=2)
    assert d.accepted and tag_of(d).shards == (4, 8) and tag_of(d).gpus == 1


def test_shards_count_against_the_class_quota_at_submission(cfg):
    # class interactive: at most 4 GPUs per user in live jobs (testbed.toml)
    assert run(cfg, held={"interactive": 3}, tres_per_node="gres:shard:1").accepted
    # a fifth GPU's worth of interactive shards: refused with the quota (shards never run as train)
    d = run(cfg, held={"interactive": 4}, tres_per_node="gres:shard:1")
    assert (
        not d.accepted
        and "allows 4 GPU(s) per user at once; you hold 4 in live jobs and asked 1" in d.message
    )
    d = run(
        cfg, held={"interactive": 4}, tres_per_node="gres:shard:1", comment="dl:class=interactive"
    )
    assert (
        not d.accepted
        and "allows 4 GPU(s) per user at once; you hold 4 in live jobs and asked 1" in d.message
    )


def test_a_shard_job_has_the_cpu_and_memory_caps_of_the_gpu_it_counts_as(cfg):
    cap = cfg.caps.max_cpus_per_gpu
    assert run(cfg, tres_per_node="gres:shard:1", cpus_per_task=cap).accepted
    d = run(cfg, tres_per_node="gres:shard:1", cpus_per_task=cap + 1)
    assert not d.accepted and f"for 1 GPU(s); at most {cap} CPUs per GPU" in d.message


@pytest.mark.parametrize(
    "mem, words",
    [
        (
            "500G",
            "dl:gpu_mem=500G needs more memory than any GPU here has (at most 80 GB, on h100)",
        ),
        ("0", "cannot read dl:gpu_mem='0'"),
        ("0G", "cannot read dl:gpu_mem='0G'"),
        ("1e400G", "cannot read dl:gpu_mem='1e400G'"),
        ("", "cannot read dl:gpu_mem=''"),
    ],
)
def test_absurd_gpu_memory_needs_are_refused_not_read_as_one_shard(cfg, mem, words):
    d = run(cfg, tres_per_job="gres:gpu:1", comment=f"dl:class=inference;gpu_mem={mem}")
    assert not d.accepted and d.rule == "validate.gpu_mem" and words in d.message, d.message


def test_a_gpu_memory_need_within_the_largest_gpu_is_accepted(cfg, mixed):
    assert run(cfg, tres_per_job="gres:gpu:1", comment="dl:class=inference;gpu_mem=80G").accepted
    # a named type: its own memory is the bound (v100: 32 GB on the mixed testbed)
    d = run(mixed, tres_per_job="gres:gpu:v100:1", comment="dl:gpu_mem=40G")
    assert not d.accepted and "more memory than a v100 GPU has (32 GB)" in d.message


# --- the prioritizer and the filter's live counts --------------------------------------------


def _job(
    jid,
    *,
    shards=1,
    nodes=None,
    state=JobState.RUNNING,
    tagged=1,
    job_class="interactive",
    gpus=0,
    user="mallory",
):
    text = f"sdl1:class={job_class};ckpt=0;gpus={tagged};shape=any"
    return Job(
        job_id=jid,
        user=user,
        account="a",
        num_gpus=gpus,
        num_nodes=nodes,
        state=state,
        shards=shards,
        time_limit=1800.0,
        submit_time=float(jid),
        start_time=100.0 if state is JobState.RUNNING else None,
        admin_comment=text,
    )


def test_running_and_pending_shard_jobs_count_as_gpus_in_the_prioritizer():
    for state in (JobState.RUNNING, JobState.PENDING):
        j = _job(1, state=state)
        apply_tags(j)
        assert j.num_gpus == 1
    old = _job(2, tagged=0, nodes=2)  # tagged before shards counted: a GPU on each node
    apply_tags(old)
    assert old.num_gpus == 2
    bypass = Job(job_id=3, user="u", shards=2, state=JobState.RUNNING, num_nodes=1)  # no tag at all
    apply_tags(bypass)
    assert bypass.num_gpus == 1
    whole = Job(
        job_id=4,
        user="u",
        num_gpus=2,
        state=JobState.RUNNING,
        admin_comment="sdl1:class=train;ckpt=0;gpus=2;shape=any",
    )
    apply_tags(whole)
    assert whole.num_gpus == 2


def test_eight_interactive_shard_jobs_and_four_gpus_are_held_to_the_class_quota(cfg):
    jobs = [_job(i) for i in range(1, 9)]
    jobs.append(
        Job(
            job_id=9,
            user="mallory",
            account="a",
            num_gpus=4,
            state=JobState.RUNNING,
            time_limit=1800.0,
            submit_time=9.0,
            start_time=100.0,
            admin_comment="sdl1:class=interactive;ckpt=0;gpus=4;shape=1x4",
        )
    )
    for j in jobs:
        apply_tags(j)
    demoted = class_demotions(jobs, cfg)
    # the earliest jobs keep the class up to 4 GPUs: four shard jobs; the rest run as train
    assert sorted(demoted) == [5, 6, 7, 8, 9], demoted
    assert "allows 4 GPU(s) per user at once" in demoted[9]
    # the filter's own count of what the user holds sees the 12 GPUs too (old tags included)
    counts = live_counts([*jobs[:8], _job(10, tagged=0)])
    assert counts["mallory"].class_gpus["interactive"] == 9


def test_the_ledger_charges_a_running_shard_job_and_plans_no_preemption_around_it():
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_cycle import MemoryCluster

    from prioritizer import Prioritizer
    from slurm_dl.store import Store

    config = load_config(REPO / "site-configs" / "testbed.toml")
    c = MemoryCluster()
    j = c.add(
        1,
        0,
        running_on="gpu01",
        shards=2,
        comment="",
        admin_comment="sdl1:class=inference;ckpt=0;gpus=1;shape=any;shards=2:8",
    )
    j.job_class = JobClass.INFERENCE
    c.add(2, 8, comment="dl:ckpt=1")  # a whole node waits: the shard job is no victim
    p = Prioritizer(config, c, Store("sqlite://"))
    p.run_cycle()
    c.now += 30
    p.run_cycle()
    assert p.ledger.attained(1) == pytest.approx(30.0), (
        "a shard job's GPU-time is charged as one GPU's"
    )
    assert not c.signals and not c.requeues
