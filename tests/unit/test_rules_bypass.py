"""Ways around the filter's caps, closed classes and quotas, each tried as a user would.

Every CPU and memory option counts (``--ntasks-per-gpu``, ``--exclusive`` in all its forms,
jobs without GPUs on GPU nodes); classes above train are closed until the site opens them;
quotas count array tasks, not job ids; an absurd value is a refusal, never an exception.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_dl.core.arrays import parse_array
from slurm_dl.core.config import config_warnings, parse_config
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.model import Job, JobClass, JobState
from slurm_dl.core.policy.admission import DeadlineAdmission
from slurm_dl.core.policy.deadline import admit_deadlines
from slurm_dl.core.rules import FilterContext, decide
from slurm_dl.core.live import live_counts
from slurm_dl.core.rules.request import NO_VAL, NO_VAL16, JobRequest
from slurm_dl.core.tags import parse_tag

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def cfg():
    return load_config(
        REPO / "site-configs" / "testbed.toml"
    )  # 4 x 8 GPUs, 32 CPUs; 4 CPUs and 31G per GPU


def with_caps(cfg, **caps):
    data = cfg.model_dump(mode="json")
    data["caps"].update(caps)
    if caps.get("cpu_only_partition"):
        data["partitions"].append({"name": caps["cpu_only_partition"]})
    return parse_config(data)


def job(**fields):
    base = {
        "user_name": "alice",
        "user_id": 1000,
        "time_limit": 60,
        "min_nodes": NO_VAL,
        "max_nodes": NO_VAL,
        "requeue": NO_VAL16,
        "has_script": True,
        "shared": NO_VAL16,
        "ntasks_per_tres": NO_VAL16,
        "het_job_offset": NO_VAL,
    }
    base.update(fields)
    return base


def run(cfg, ctx=None, **fields):
    return decide(job(**fields), cfg, ctx or FilterContext(now=NOW))


# --- CPUs and memory asked in every form -------------------------------------------------
@pytest.mark.parametrize(
    "fields",
    [
        {"tres_per_job": "gres:gpu:1", "ntasks_per_tres": 32},  # --ntasks-per-gpu=32 --gpus=1
        {"tres_per_node": "gres:gpu:1", "ntasks_per_tres": 8, "cpus_per_task": 1},
        {"tres_per_job": "gres:gpu:1", "shared": 2},  # --exclusive=user
        {"tres_per_job": "gres:gpu:1", "shared": 3},  # --exclusive=mcs
        {"tres_per_job": "gres:gpu:1", "shared": 4},  # --exclusive=topo (24.11)
        {"tres_per_job": "gres:gpu:1", "shared": 0},  # --exclusive
        {"tres_per_job": "gres:gpu:1", "ntasks_per_node": 32},
        {"tres_per_job": "gres:gpu:1", "num_tasks": 8, "cpus_per_task": 4},
        {"tres_per_job": "gres:gpu:1", "min_mem_per_node": 250_000},
        {"tres_per_job": "gres:gpu:1", "min_mem_per_node": 0},  # --mem=0: the whole node
    ],
)
def test_every_way_to_ask_more_cpus_or_memory_per_gpu_is_refused(cfg, fields) -> None:
    d = run(cfg, **fields)
    assert not d.accepted and d.rule in (
        "validate.cpus_per_gpu",
        "validate.exclusive",
        "validate.mem_per_gpu",
    ), d
    assert "slurm-dl:" in d.message and "Fix:" in d.message and "\n" not in d.message


def test_within_the_caps_is_accepted(cfg) -> None:
    assert run(
        cfg, tres_per_job="gres:gpu:2", ntasks_per_tres=4
    ).accepted  # 8 tasks, 8 CPUs for 2 GPUs
    assert run(
        cfg, tres_per_job="gres:gpu:8", shared=2
    ).accepted  # a whole node's GPUs may hold it whole
    assert run(
        cfg, tres_per_job="gres:gpu:1", shared=1
    ).accepted  # --oversubscribe holds nothing more


@pytest.mark.parametrize(
    "fields",
    [
        {"cpus_per_task": 32},
        {"min_cpus": 32},
        {"min_mem_per_node": 250_000},
        {"min_mem_per_cpu": 64_000},
        {"shared": 0},
        {"shared": 2, "min_nodes": 4},
        {"num_tasks": 5},
    ],
)
def test_jobs_without_gpus_on_gpu_nodes_are_capped(cfg, fields) -> None:
    """Four ``-c 32 --mem=250G`` jobs would strand all 32 GPUs: a job without GPUs holds at most
    one GPU's share (cpu_only_jobs = "cap", the default)."""
    d = run(cfg, **fields)
    assert not d.accepted and d.rule == "validate.cpu_only", d
    assert "without" in d.message and "Fix:" in d.message


def test_small_cpu_jobs_pass_and_the_other_site_rules_do_what_they_say(cfg) -> None:
    assert run(cfg, cpus_per_task=4, min_mem_per_node=16_000).accepted
    refuse = with_caps(cfg, cpu_only_jobs="refuse")
    d = run(refuse, cpus_per_task=1)
    assert not d.accepted and "asks for no GPU" in d.message
    assert run(with_caps(cfg, cpu_only_jobs="allow"), cpus_per_task=32).accepted
    route = with_caps(cfg, cpu_only_jobs="route", cpu_only_partition="cpu")
    d = run(route, cpus_per_task=32)
    assert (
        d.accepted
        and d.changes["partition"] == "cpu"
        and any("partition cpu" in n for n in d.notices)
    )
    # a job asking for the CPU partition itself is not capped there
    assert run(with_caps(cfg, cpu_only_partition="cpu"), cpus_per_task=32, partition="cpu").accepted


def test_route_needs_a_partition_without_gpus(cfg) -> None:
    data = cfg.model_dump(mode="json")
    data["caps"].update(cpu_only_jobs="route")
    with pytest.raises(Exception, match="cpu_only_partition"):
        parse_config(data)
    data["caps"].update(cpu_only_partition="gpu")
    with pytest.raises(Exception, match="has GPU nodes"):
        parse_config(data)


# --- protected classes closed unless the site opens them ---------------------------------
def test_code_defaults_close_serve_and_interactive(cfg) -> None:
    data = cfg.model_dump(mode="json")
    data.pop("classes")
    closed = parse_config(data)
    d = run(closed, tres_per_node="gres:gpu:1", comment="dl:class=serve")
    assert not d.accepted and "not open on this cluster" in d.message
    d = run(
        closed, tres_per_node="gres:gpu:1", has_script=False
    )  # srun/salloc: runs as train instead
    assert (
        d.accepted
        and d.job_class is JobClass.TRAIN
        and any("runs as class train" in n for n in d.notices)
    )


def test_serve_is_refused_for_a_user_the_site_did_not_allow(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", comment="dl:class=serve", user_name="nobody")
    assert not d.accepted and d.rule == "validate.class_access" and "users root" in d.message
    assert (
        run(cfg, tres_per_node="gres:gpu:1", comment="dl:class=serve", user_name="root").job_class
        is JobClass.SERVE
    )


def test_interactive_sessions_are_capped_like_the_rest(cfg) -> None:
    d = run(cfg, tres_per_node="gres:gpu:1", has_script=False, cpus_per_task=32)
    assert not d.accepted and d.rule == "validate.cpus_per_gpu"
    d = run(
        cfg,
        tres_per_node="gres:gpu:2",
        has_script=False,
        ctx=FilterContext(NOW, user_class_gpus={"interactive": 3}),
    )
    assert d.accepted and d.job_class is JobClass.TRAIN  # over the quota of 4: runs as train


def test_config_check_warns_on_a_class_open_to_everyone_without_a_quota(cfg) -> None:
    assert not [w for w in config_warnings(cfg) if "open to every user" in w]
    data = cfg.model_dump(mode="json")
    data["classes"]["serve"].update(allow_users=["*"], max_gpus_per_user=None)
    warnings = config_warnings(parse_config(data))
    assert any("classes.serve is open to every user" in w for w in warnings), warnings


# --- arrays count their tasks ------------------------------------------------------------
@pytest.mark.parametrize(
    "text, tasks, throttle",
    [
        ("0-49", 50, None),
        ("0-49%4", 50, 4),
        ("1,3,5-7", 5, None),
        ("0-15:4", 4, None),
        ("[0-3]", 4, None),
        ("0-3,2-5", 6, None),
        ("0-9:2,0-9:3", 7, None),
        ("7", 1, None),
    ],
)
def test_array_expressions_are_counted(text, tasks, throttle) -> None:
    spec = parse_array(text)
    assert spec.tasks == tasks and spec.throttle == throttle


@pytest.mark.parametrize("text", ["", "x", "5-1", "1-", "-1", "0-9999999999", "1-3%x", "٣", "1;2"])
def test_what_is_no_array_expression_is_none(text) -> None:
    assert parse_array(text) is None


def deadline_array(tasks: str, **extra):
    return job(
        tres_per_node="gres:gpu:1",
        time_limit=30,
        array_inx=tasks,
        comment=f"dl:deadline={int(NOW) + 7200}",
        **extra,
    )


def test_the_deadline_quota_counts_array_tasks(cfg) -> None:
    """Quota 4 deadline jobs per user: one array of 50 tasks is 50 of them."""
    assert not decide(deadline_array("0-49"), cfg, FilterContext(NOW)).accepted
    assert decide(deadline_array("0-3"), cfg, FilterContext(NOW)).accepted
    d = decide(deadline_array("0-1"), cfg, FilterContext(NOW, user_deadline_jobs=3))
    assert not d.accepted and "this array adds 2" in d.message


def test_an_array_whose_waves_end_after_the_deadline_is_refused(cfg) -> None:
    d = decide(
        job(
            tres_per_node="gres:gpu:1",
            time_limit=50,
            array_inx="0-3%1",
            comment=f"dl:deadline={int(NOW) + 7200}",
        ),
        cfg,
        FilterContext(NOW),
    )
    assert not d.accepted and "4 waves" in d.message


def test_live_counts_count_a_pending_arrays_tasks() -> None:
    tag = "sdl1:class=sweep;ckpt=0;gpus=1;shape=1x1;deadline=1800007200"
    jobs = [
        Job(9, user="u", admin_comment=tag, state=JobState.PENDING, array_job_id=9, array_tasks=50)
    ]
    held = live_counts(jobs)["u"]
    assert held.deadline_jobs == 50 and held.class_gpus["sweep"] == 50


def test_the_prioritizer_counts_array_tasks_against_the_quota(cfg) -> None:
    arrays = [
        Job(
            i,
            user="u",
            deadline=NOW + 3600,
            time_limit=600.0,
            submit_time=i,
            num_gpus=1,
            array_job_id=i,
            array_tasks=50,
        )
        for i in range(1, 5)
    ]
    ignored = admit_deadlines(arrays, cfg)
    assert set(ignored) == {1, 2, 3, 4}  # each array alone is over the quota of 4


def test_admission_sees_a_pending_array_as_all_its_tasks() -> None:
    adm = DeadlineAdmission()
    array = Job(
        1,
        deadline=NOW + 3600,
        time_limit=3000.0,
        num_gpus=1,
        array_job_id=1,
        array_tasks=40,
        array_throttle=None,
    )
    assert (
        adm.decide(array, NOW, total_gpus=32) is not None
    )  # 40 GPU-hours of work, 32 GPU-hours left
    small = Job(
        2, deadline=NOW + 3600, time_limit=3000.0, num_gpus=1, array_job_id=2, array_tasks=20
    )
    assert adm.decide(small, NOW, total_gpus=32) is None
    task = Job(
        3, deadline=NOW + 3600, time_limit=3000.0, num_gpus=1, array_job_id=2
    )  # split off array 2
    assert adm.decide(task, NOW, total_gpus=32) is None and adm.admitted[3] == adm.admitted[2]
    demoted_task = Job(4, deadline=NOW + 3600, time_limit=3000.0, num_gpus=1, array_job_id=1)
    assert adm.decide(demoted_task, NOW, total_gpus=32) == adm.demoted[1]


# --- heterogeneous jobs share the first component's class ---------------------------------
def test_a_later_component_takes_the_first_ones_class(cfg) -> None:
    leader = run(cfg, tres_per_node="gres:gpu:1", comment="dl:ckpt=1", requeue=1, het_job_offset=0)
    tag = leader.changes["admin_comment"]
    second = run(
        cfg,
        tres_per_node="gres:gpu:1",
        comment="dl:class=serve",
        het_job_offset=1,
        het_leader_tag=tag,
        user_name="root",
    )
    t = parse_tag(second.changes["admin_comment"])
    assert t.job_class is JobClass.TRAIN and t.checkpointable  # the first one's, not its own hint
    lost = run(
        cfg,
        tres_per_node="gres:gpu:1",
        comment="dl:class=serve;ckpt=1",
        het_job_offset=1,
        user_name="root",
    )
    t = parse_tag(lost.changes["admin_comment"])
    assert t.job_class is JobClass.TRAIN and not t.checkpointable


def test_a_forged_leader_tag_in_the_job_is_not_read_from_user_fields(cfg) -> None:
    req = JobRequest.from_job_desc(
        job(comment="het_leader_tag=sdl1:class=serve;ckpt=0;gpus=1;shape=any")
    )
    assert req.het_leader_tag is None


# --- absurd values: a refusal with a message, never an exception --------------------------
@pytest.mark.parametrize(
    "fields",
    [
        {"tres_per_job": "gres:gpu:" + "9" * 4400},
        {"tres_per_node": "gres:gpu:h100:" + "9" * 30},
        {"tres_per_job": "gres:gpu:" + "x" * 5000 + ":1"},
        {"tres_per_job": "gres/gpu=" + "9" * 5000},
        {"min_nodes": 10**4000},
        {"num_tasks": -5, "cpus_per_task": float("nan")},
        {"comment": "dl:deadline=" + "9" * 5000, "time_limit": 30},
        {"array_inx": "0-" + "9" * 5000},
        {"cpus_per_tres": "gres:gpu:" + "9" * 5000, "tres_per_job": "gres:gpu:1"},
    ],
)
def test_absurd_values_are_decided(cfg, fields) -> None:
    d = run(cfg, **fields)
    assert d.action in ("accept", "reject")
    if not d.accepted:
        assert d.message.startswith("slurm-dl:") and len(d.message) < 400


# --- accounts Slurm does not know for the user --------------------------------------------
def test_an_account_the_user_has_no_association_with_is_refused(cfg) -> None:
    mine = FilterContext(NOW, user_accounts=frozenset({"physics", "dl"}))
    d = run(cfg, ctx=mine, tres_per_job="gres:gpu:1", account="made-up")
    assert not d.accepted and d.rule == "validate.account" and "yours: dl, physics" in d.message
    assert run(
        cfg, ctx=mine, tres_per_job="gres:gpu:1", account="Physics"
    ).accepted  # Slurm lowers it
    assert run(cfg, ctx=mine, tres_per_job="gres:gpu:1").accepted  # no -A: Slurm's default account
    unknown = FilterContext(NOW, user_accounts=None)  # no slurmdbd: nothing to check against
    assert run(cfg, ctx=unknown, tres_per_job="gres:gpu:1", account="made-up").accepted


def test_the_service_reads_each_users_accounts_from_the_associations(tmp_path) -> None:
    from jobsubmit.service import FilterService

    pairs = frozenset({("alice", "physics"), ("alice", "dl"), ("bob", "bio")})
    service = FilterService(
        REPO / "site-configs" / "testbed.toml", clock=lambda: NOW, associations_fetch=lambda: pairs
    )
    service.refresh_associations()
    refused = service.decide_job(job(tres_per_job="gres:gpu:1", account="bio"), 1000)
    assert not refused.accepted and "not one of yours" in refused.message
    assert service.decide_job(job(tres_per_job="gres:gpu:1", account="dl"), 1000).accepted


def test_soft_deadline_steps_reach_the_policy_and_count_against_the_quota(cfg) -> None:
    """The filter's tag becomes Job.soft_deadlines; a job with steps is one deadline job (the
    filter's live count and the prioritizer's quota); a Slurm --deadline beside it wins."""
    from prioritizer.jobs import apply_tags

    d = decide(
        job(tres_per_node="gres:gpu:1", time_limit=60, comment="dl:deadline_steps=2h=10,4h=5"),
        cfg,
        FilterContext(NOW),
    )
    tag = d.changes["admin_comment"]
    soft = Job(
        1, user="u", admin_comment=tag, state=JobState.PENDING, submit_time=NOW, time_limit=3600.0
    )
    apply_tags(soft)
    assert soft.deadline is None and soft.soft_deadlines == ((NOW + 7200, 1.0), (NOW + 14400, 0.5))
    strict = Job(2, user="u", admin_comment=tag, state=JobState.PENDING, deadline=NOW + 600)
    apply_tags(strict)
    assert strict.deadline == NOW + 600 and strict.soft_deadlines == ()
    assert live_counts([soft])["u"].deadline_jobs == 1
    many = [
        Job(i, user="u", soft_deadlines=((NOW + 7200, 1.0),), time_limit=600.0, submit_time=NOW + i)
        for i in range(1, 6)
    ]
    far = Job(
        9,
        user="v",
        soft_deadlines=((NOW + 3600, 1.0), (NOW + 30 * 86400, 0.1)),
        time_limit=600.0,
        submit_time=NOW,
    )
    ignored = admit_deadlines([*many, far], cfg)
    assert (
        set(ignored) == {5, 9}
        and "already has 4 deadline jobs" in ignored[5]
        and "at most 7" in ignored[9]
    )
