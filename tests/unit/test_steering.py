"""Steering waiting jobs between GPU types: the pure choice and the daemon's levers."""

from __future__ import annotations

from pathlib import Path

import pytest

from prioritizer.steer import Steering, steer
from slurm_dl.cli.config_file import load_config
from slurm_dl.core.ledger import Ledger
from slurm_dl.core.model import ClusterSnapshot, Job, JobState, Node
from slurm_dl.core.steering import Lever, choose_types, type_levers
from slurm_dl.core.throughput import ThroughputModel

REPO = Path(__file__).resolve().parents[2]
MATRIX = {"resnet": {"h100": 3.0, "v100": 1.0}, "lstm": {"h100": 1.1, "v100": 1.0}}
BOTH = ("h100", "v100")


@pytest.fixture
def model():
    return ThroughputModel({"h100": 3.0, "v100": 1.0}, MATRIX)


def nodes(h100_free: int = 8, v100_free: int = 8) -> list[Node]:
    return [
        Node("gpu01", 8, "h100", gpus_used=8 - h100_free),
        Node("gpu03", 8, "v100", gpus_used=8 - v100_free),
    ]


def job(i: int, gpus: int = 8, model_name: str = "resnet", types=BOTH) -> Job:
    return Job(i, num_gpus=gpus, model=model_name, accepted_types=types, partition="gpu")


def test_crowded_the_jobs_that_gain_most_get_the_fast_type_whatever_their_place(model) -> None:
    """Three jobs for two nodes: the LSTM (1.1x on h100) is first in the queue but takes the
    v100, where its comparative advantage is; the ResNet (3x) gets the h100; the third waits."""
    lstm, resnet, third = job(1, model_name="lstm"), job(2), job(3)
    got = choose_types([lstm, resnet, third], nodes(), model, {1: BOTH, 2: BOTH, 3: BOTH})
    assert (
        got[1].gpu_type == "v100"
        and got[1].starts_now
        and got[2].gpu_type == "h100"
        and got[2].starts_now
    )
    assert "goes to jobs that gain more" in got[1].why and not got[3].starts_now


def test_crowded_a_job_waits_rather_than_run_at_under_half_its_speed(model) -> None:
    """The ResNet runs at a third of its speed on v100: with others waiting behind it, it
    leaves the v100 to them and waits for an h100."""
    resnet, lstm = job(1), job(2, model_name="lstm")
    got = choose_types([resnet, lstm], nodes(h100_free=0), model, {1: BOTH, 2: BOTH})
    assert not got[1].starts_now and got[1].gpu_type == "h100"
    assert got[2].starts_now and got[2].gpu_type == "v100"


def test_crowded_jobs_all_as_slow_there_take_the_slow_type_rather_than_leave_it_idle(
    model,
) -> None:
    """Two ResNets (a third of their speed on v100, as every job about): whoever waits leaves
    the v100 to a job no better there, so nobody waits and the v100 does not stand idle (the
    wait is for a job whose comparative advantage there is under the others')."""
    first, second = job(1), job(2)
    got = choose_types([first, second], nodes(h100_free=0), model, {1: BOTH, 2: BOTH})
    assert got[1].starts_now and got[1].gpu_type == "v100"
    assert not got[2].starts_now


def test_not_crowded_each_job_takes_its_fastest_type_with_room(model) -> None:
    """Room for all: nothing is held back for jobs that are not there (the simulator's rule)."""
    lstm, resnet = job(1, model_name="lstm"), job(2)
    got = choose_types([lstm, resnet], nodes(), model, {1: BOTH, 2: BOTH})
    assert got[1].gpu_type == "h100" and got[2].gpu_type == "v100" and got[2].starts_now


def test_a_lone_job_takes_its_fastest_type_with_room(model) -> None:
    got = choose_types([job(1)], nodes(h100_free=0), model, {1: BOTH})
    assert got[1].gpu_type == "v100" and got[1].starts_now  # h100 is full: v100 now, not later
    got = choose_types([job(1)], nodes(h100_free=0, v100_free=0), model, {1: BOTH})
    assert got[1].gpu_type == "h100" and not got[1].starts_now  # nothing free: wait for the fastest


def test_who_starts_follows_the_policys_order(model) -> None:
    """One 8-GPU hole: the first job in the policy's order takes it, even if the second gains more."""
    first, second = job(1, model_name="lstm"), job(2)
    got = choose_types([first, second], nodes(h100_free=8, v100_free=0), model, {1: BOTH, 2: BOTH})
    assert got[1].starts_now and got[1].gpu_type == "h100" and not got[2].starts_now


def test_the_prioritizer_and_the_simulator_order_types_by_the_same_rule(model) -> None:
    """The simulator's aware choice ranks a job's node groups with the core's comparative order."""
    from slurm_dl.core.steering import comparative_order, job_rates, mean_rates

    rates = [job_rates(model, job(i, model_name=m), BOTH) for i, m in ((1, "lstm"), (2, "resnet"))]
    means = mean_rates(rates)
    assert comparative_order(rates[0], means, BOTH) == ["v100", "h100"]
    assert comparative_order(rates[1], means, BOTH) == ["h100", "v100"]


def test_single_type_jobs_are_never_steered_but_take_their_room(model) -> None:
    typed = job(1, types=("h100",))
    flexible = job(2)
    got = choose_types([typed, flexible], nodes(), model, {1: ("h100",), 2: BOTH})
    assert 1 not in got and got[2].gpu_type == "v100"


def test_levers_prefer_a_partition_of_one_type() -> None:
    cfg = load_config(REPO / "site-configs" / "testbed-mixed.toml")
    levers = type_levers(cfg.node_groups, [p.name for p in cfg.partitions])
    assert levers == {"h100": Lever(partition="h100"), "v100": Lever(partition="v100")}
    one_partition = [g.model_copy(update={"partitions": ["gpu"]}) for g in cfg.node_groups]
    assert type_levers(one_partition, ["gpu"]) == {
        "h100": Lever(feature="h100"),
        "v100": Lever(feature="v100"),
    }


class Levers:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str, str]] = []

    def set_partition(self, job_id: int, partition: str) -> None:
        self.calls.append((job_id, "partition", partition))

    def set_features(self, job_id: int, features: str) -> None:
        self.calls.append((job_id, "features", features))


def test_the_daemon_sets_a_lever_only_where_it_changes_something() -> None:
    cfg = load_config(REPO / "site-configs" / "testbed-mixed.toml")
    st = Steering(cfg)
    waiting = [
        Job(1, num_gpus=2, accepted_types=BOTH, partition="h100"),
        Job(2, num_gpus=2, accepted_types=BOTH, partition="gpu"),
        Job(3, num_gpus=2, accepted_types=("v100",), partition="v100"),
    ]
    snap = ClusterSnapshot(
        taken_at=0.0,
        jobs=waiting,
        nodes=[Node("gpu01", 8, "h100", gpus_used=6), Node("gpu03", 8, "v100")],
    )
    be = Levers()
    report = steer(st, be, snap, waiting)
    assert be.calls == [
        (2, "partition", "v100")
    ]  # job 1 already on h100 (room for 2); job 3 names v100
    assert report.moved == {2: "v100"}


def test_charges_are_normalised_by_type_speed() -> None:
    led = Ledger(3600.0)
    speeds = {"h100": 3.0, "v100": 1.0}
    fast = Job(1, account="a", num_gpus=1, gpu_type="h100", state=JobState.RUNNING, start_time=0.0)
    slow = Job(2, account="b", num_gpus=1, gpu_type="v100", state=JobState.RUNNING, start_time=0.0)
    led.observe([fast, slow], 0.0, speeds)
    led.observe([fast, slow], 100.0, speeds)
    assert led.attained(1) == pytest.approx(300.0) and led.attained(2) == pytest.approx(100.0)
    assert led.jobs[1].norm_executed_s == pytest.approx(300.0) and led.jobs[
        1
    ].executed_s == pytest.approx(100.0)
    assert led.usage("a", 100.0) == pytest.approx(3 * led.usage("b", 100.0))


# --- moving an opted-in job to a faster type that frees ---------------------------------------
def mixed_cluster():
    from test_cycle import MemoryCluster

    c = MemoryCluster(nodes=0)
    c.nodes = [Node("gpu01", 8, "h100"), Node("gpu03", 8, "v100")]
    return c


TAG = "sdl1:class=train;ckpt=1;gpus=8;shape=1x8;types=h100+v100"


def test_an_opted_in_job_moves_once_to_a_faster_type_that_frees_and_not_back(tmp_path) -> None:
    from prioritizer import Prioritizer
    from slurm_dl.store import Store

    cfg = load_config(REPO / "site-configs" / "testbed-mixed.toml")
    c = mixed_cluster()
    hog = c.add(
        1,
        8,
        running_on="gpu01",
        admin_comment="sdl1:class=train;ckpt=0;gpus=8;shape=1x8;types=h100",
    )
    hog.gpu_type = "h100"
    slow = c.add(2, 8, running_on="gpu03", admin_comment=TAG, partition="v100")
    slow.gpu_type = "v100"
    c.add(
        3, 8, admin_comment="sdl1:class=train;ckpt=1;gpus=8;shape=1x8;types=v100", partition="v100"
    )
    p = Prioritizer(cfg, c, Store(f"sqlite:///{tmp_path / 'p.db'}"))
    p.run_cycle()
    c.now += 30
    del c.jobs[1]  # the h100 job ends: its node frees, and no waiting job accepts h100
    p.run_cycle()
    assert c.signals == [(2, "USR2")]  # the move: checkpoint first
    c.now += cfg.preemption.grace_seconds + 1
    p.run_cycle()
    assert c.requeues == [2]
    c.now += 3
    p.run_cycle()  # pending again: steered to the type that freed
    assert (2, "h100") in c.steers
    c.start(2, "gpu01")
    c.jobs[2].gpu_type = "h100"
    for _ in range(5):
        c.now += 30
        p.run_cycle()
    assert c.signals == [(2, "USR2")] and c.requeues == [2]  # once, never back to v100
    assert all(job_id != 3 for job_id, _ in c.steers)  # a job naming one type is never steered
    row = [r for r in p.store.preemptions() if r.victim_job_id == 2][0]
    assert row.need_job_id == 2 and "move from v100 to h100" in row.reason


def test_moves_need_the_speedup_room_and_nobody_waiting(model) -> None:
    from slurm_dl.core.steering import plan_moves

    on_v100 = Job(
        1, num_gpus=8, model="resnet", accepted_types=BOTH, gpu_type="v100", state=JobState.RUNNING
    )
    flat = Job(
        2, num_gpus=8, model="lstm", accepted_types=BOTH, gpu_type="v100", state=JobState.RUNNING
    )
    free_h100 = [Node("gpu01", 8, "h100"), Node("gpu03", 8, "v100", gpus_used=8)]
    yes = lambda j: True  # noqa: E731
    moves = plan_moves([flat, on_v100], [], free_h100, model, min_speedup=1.5, can_move=yes)
    assert [(m.job_id, m.to_type) for m in moves] == [(1, "h100")]  # the LSTM gains 1.1x: stays
    waiting = [Job(3, num_gpus=8, accepted_types=("h100",))]
    assert plan_moves([on_v100], waiting, free_h100, model, min_speedup=1.5, can_move=yes) == []
    assert (
        plan_moves([on_v100], [], free_h100, model, min_speedup=1.5, can_move=lambda j: False) == []
    )
    full = [Node("gpu01", 8, "h100", gpus_used=4), Node("gpu03", 8, "v100", gpus_used=8)]
    assert plan_moves([on_v100], [], full, model, min_speedup=1.5, can_move=yes) == []


def test_a_job_of_an_account_below_its_fair_share_moves_to_room_others_wait_for(model) -> None:
    # fair share: an account below its share would be ahead of the waiting jobs of accounts at
    # or above it for the free H100s, so its job on a V100 moves there even while they wait,
    # onto a node already in use (a whole free node is left to the wide jobs waiting)
    from slurm_dl.core.steering import plan_moves

    def running(i: int, account: str, gpu_type: str, ran: float = 3600.0) -> Job:
        return Job(
            i,
            account=account,
            num_gpus=4,
            model="resnet",
            accepted_types=BOTH,
            gpu_type=gpu_type,
            state=JobState.RUNNING,
            executed_s=ran,
        )

    mine, theirs = running(1, "behind", "v100"), running(2, "ahead", "v100")
    waiting = [Job(3, account="ahead", num_gpus=4, accepted_types=BOTH)]
    half = [Node("gpu01", 8, "h100", gpus_used=4), Node("gpu03", 8, "v100", gpus_used=8)]
    yes = lambda j: True  # noqa: E731
    moves = plan_moves(
        [theirs, mine],
        waiting,
        half,
        model,
        min_speedup=1.5,
        can_move=yes,
        behind={"behind"},
        restart_s=60,
    )
    assert [(m.job_id, m.to_type) for m in moves] == [(1, "h100")]
    assert "within its fair share" in moves[0].why
    # without the fair-share standing, nobody moves into room a waiting job wants
    assert plan_moves([theirs, mine], waiting, half, model, min_speedup=1.5, can_move=yes) == []
    # a whole free node is left to the waiting jobs
    whole = [Node("gpu01", 8, "h100"), Node("gpu03", 8, "v100", gpus_used=8)]
    assert (
        plan_moves([mine], waiting, whole, model, min_speedup=1.5, can_move=yes, behind={"behind"})
        == []
    )
    # with nobody waiting, the account below its share goes first for the room
    moves = plan_moves(
        [theirs, mine], [], half, model, min_speedup=1.5, can_move=yes, behind={"behind"}
    )
    assert [m.job_id for m in moves] == [1]
    # the time it would save, reckoned on its run so far, must beat the restart: ResNet runs
    # 3x faster on an H100 here, so 60 s of run saves 40 s, less than a 60 s restart
    short = running(4, "behind", "v100", ran=60.0)
    assert (
        plan_moves(
            [short], [], half, model, min_speedup=1.5, can_move=yes, behind={"behind"}, restart_s=60
        )
        == []
    )
    # never to a slower type
    on_h100 = running(5, "behind", "h100")
    free_v100 = [Node("gpu01", 8, "h100", gpus_used=8), Node("gpu03", 8, "v100", gpus_used=4)]
    assert (
        plan_moves(
            [on_h100], [], free_v100, model, min_speedup=1.5, can_move=yes, behind={"behind"}
        )
        == []
    )


def test_under_fair_share_a_job_of_an_account_within_its_share_moves_where_others_wait(
    tmp_path,
) -> None:
    # the cycle passes the fair-share standings to the moves: "small" asks 4 GPUs, within its
    # share, and runs on a V100 for an hour; big's jobs wait for H100s, one node of which has 4
    # GPUs in use and 4 free. small's job moves there (under the combined mix it would not:
    # others want that room)
    from prioritizer import Prioritizer
    from slurm_dl.store import Store

    text = (REPO / "site-configs" / "testbed-mixed.toml").read_text()
    for mix, moved in (("fairshare", [(2, "USR2")]), ("combined", [])):
        site = tmp_path / f"{mix}.toml"
        site.write_text(text.replace('mix = "combined"', f'mix = "{mix}"'))
        cfg = load_config(site)
        c = mixed_cluster()
        c.nodes = [Node("gpu01", 8, "h100", gpus_used=4), Node("gpu03", 8, "v100", gpus_used=8)]
        hog = c.add(
            1,
            4,
            running_on="gpu01",
            account="big",
            admin_comment="sdl1:class=train;ckpt=0;gpus=4;shape=1x4;types=h100",
        )
        hog.gpu_type = "h100"
        small = c.add(
            2,
            4,
            running_on="gpu03",
            account="small",
            partition="v100",
            admin_comment="sdl1:class=train;ckpt=1;gpus=4;shape=1x4;types=h100+v100",
        )
        small.gpu_type, small.start_time = "v100", c.now - 3600
        hog2 = c.add(
            3,
            4,
            running_on="gpu03",
            account="big",
            admin_comment="sdl1:class=train;ckpt=1;gpus=4;shape=1x4;types=v100",
        )
        hog2.gpu_type = "v100"
        for i in (4, 5):
            c.add(
                i,
                4,
                account="big",
                admin_comment="sdl1:class=train;ckpt=1;gpus=4;shape=1x4;types=h100+v100",
            )
        p = Prioritizer(cfg, c, Store(f"sqlite:///{tmp_path / f'{mix}.db'}"))
        p.run_cycle()
        c.now += 30
        p.run_cycle()
        assert c.signals == moved, mix
        if moved:
            row = [r for r in p.store.preemptions() if r.victim_job_id == 2][0]
            assert "within its fair share" in row.reason and "move from v100 to h100" in row.reason


def _deadline_job(i: int, deadline: float, limit: float = 3600.0, **tags: str) -> Job:
    j = job(i)
    j.deadline, j.time_limit, j.submit_time, j.tags = deadline, limit, 0.0, dict(tags)
    return j


def test_a_deadline_job_is_not_sent_where_its_scaled_time_limit_misses_the_deadline(
    model,
) -> None:
    """A 1-hour ResNet due in 2 h: on v100 (a third of its speed) it needs 3 h, so with the
    h100s full it waits for an h100 instead of taking the free v100 (and saying why); due in
    4 h it may take the v100."""
    tight = _deadline_job(1, deadline=7200.0)
    got = choose_types([tight], nodes(h100_free=0), model, {1: BOTH}, now=0.0)
    assert got[1].gpu_type == "h100" and not got[1].starts_now
    assert "v100 would finish after its deadline" in got[1].why
    roomy = _deadline_job(1, deadline=4 * 3600.0)
    got = choose_types([roomy], nodes(h100_free=0), model, {1: BOTH}, now=0.0)
    assert got[1].gpu_type == "v100" and got[1].starts_now
    crowded = [tight, job(2, model_name="lstm"), job(3)]  # crowded: comparative order too
    got = choose_types(crowded, nodes(h100_free=0), model, {1: BOTH, 2: BOTH, 3: BOTH}, now=0.0)
    assert got[1].gpu_type == "h100" and got[2].gpu_type == "v100" and got[2].starts_now


def test_no_type_makes_the_deadline_the_fastest_one_is_kept(model) -> None:
    late = _deadline_job(1, deadline=1800.0)  # 1 h of work due in 30 min: nowhere in time
    got = choose_types([late], nodes(h100_free=8), model, {1: BOTH}, now=0.0)
    assert got[1].gpu_type == "h100" and "no type it accepts makes its deadline" in got[1].why


def test_only_a_promised_deadline_keeps_a_job_off_a_slow_type(model) -> None:
    """Demoted (best effort), the job goes where there is room; a soft job is held to the
    step admission promised it."""
    demoted = _deadline_job(1, deadline=7200.0, deadline_demoted="no room")
    got = choose_types([demoted], nodes(h100_free=0), model, {1: BOTH}, now=0.0)
    assert got[1].gpu_type == "v100" and got[1].starts_now
    soft = _deadline_job(1, deadline=7200.0, deadline_soft_from="7200.0")
    soft.deadline, soft.soft_deadlines = None, ((7200.0, 10.0), (20000.0, 5.0))
    got = choose_types([soft], nodes(h100_free=0), model, {1: BOTH}, now=0.0)
    assert got[1].gpu_type == "h100" and not got[1].starts_now
    got = choose_types([soft], nodes(h100_free=0), model, {1: BOTH})  # no clock: not checked
    assert got[1].gpu_type == "v100"
