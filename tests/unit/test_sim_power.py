"""Node power states in the replay (``--power-save``): the energy of a tiny trace worked out
by hand, a boot delaying a job by exactly the boot time, ``none`` leaving every result as it
was (the goldens), the predictive policy never seeing the jobs ahead, and the command."""

from __future__ import annotations

import json
import pytest
from test_sim_engine import job
from test_sim_golden import GOLDEN, check, outcome, synthetic_trace
from typer.testing import CliRunner

from slurm_dl.cli.main import app
from slurm_dl.core.config.power import PowerConfig
from slurm_dl.sim.engine.loop import ClusterResult, ClusterSpec, run_cluster
from slurm_dl.sim.engine.power import NodeSpec, PowerModel, PowerSave
from slurm_dl.sim.engine.state import PreemptionCost, SimJob
from slurm_dl.sim.ranking.ranker import make_ranker
from slurm_dl.sim.reports.metrics import summarize
from slurm_dl.sim.simulate import SimSetup

# small round figures so that the energy can be added up by hand
CFG = PowerConfig(
    gpu_busy_watts=100,
    gpu_idle_watts=10,
    node_busy_watts=50,
    node_idle_watts=20,
    off_watts=5,
    boot_seconds=100,
    shutdown_seconds=10,
)


def replay(jobs, mode: str, nodes=2, per_node=2, policy="fifo", cfg=CFG):
    save = PowerSave.parse(mode, cfg)
    r = run_cluster(
        jobs,
        ClusterSpec("c", nodes, per_node),
        make_ranker(policy),
        PreemptionCost(0.0),
        power=save,
    )
    return {sj.job.job_id: sj for sj in r.jobs}, r


TINY = [job(1, 1, 0, 1000), job(2, 2, 500, 100), job(3, 1, 2000, 10)]


def test_fixed_suspend_time_energy_by_hand():
    """Two nodes of 2 GPUs, SuspendTime 50 s. Node 1 is idle from 0: powers down at 50, off at
    60; job 2 (2 GPUs) lands on it at 500 and waits the boot (500-600), runs 600-700; idle
    again, down at 750, off at 760. Node 0 runs job 1 (1 GPU) 0-1000, down at 1050, off at
    1060. Job 3 at 2000 boots node 0. The window ends at the last submission, 2000."""
    res, r = replay(TINY, "fixed:50")
    p = r.power
    # busy: node 0 0-1000 at 50 + 100 + 10 W; node 1 600-700 at 50 + 2 x 100 W
    assert p["busy_j"] == pytest.approx(160 * 1000 + 250 * 100)
    idle_w = 20 + 2 * 10  # on and idle, booting or shutting down
    node0 = idle_w * 50 + idle_w * 10 + 5 * 940
    node1 = idle_w * 50 + idle_w * 10 + 5 * 440 + idle_w * 100 + idle_w * 50 + idle_w * 10
    node1 += 5 * 1240
    assert p["idle_j"] == pytest.approx(node0 + node1)
    assert p["gpu_s"] == pytest.approx(1 * 1000 + 2 * 100)
    assert p["off_node_s"] == pytest.approx(940 + 440 + 1240)
    assert p["power_cycles"] == 3 and p["boots"] == 1  # job 3's boot is after the window
    assert p["boot_wait_jobs"] == 2 and p["boot_wait_s"] == pytest.approx(200)
    s = summarize([r])
    assert s["energy_kwh"] == pytest.approx((185_000 + node0 + node1) / 3.6e6)
    assert s["idle_energy_kwh"] == pytest.approx((node0 + node1) / 3.6e6)
    assert s["kwh_per_gpu_hour"] == pytest.approx(s["energy_kwh"] / (1200 / 3600))
    assert s["boot_jct_s_per_job"] == pytest.approx(200 / 3)
    assert s["power_save"] == "fixed:50"


def test_none_energy_by_hand_and_schedule_unchanged():
    res, r = replay(TINY, "none")
    plain = run_cluster(TINY, ClusterSpec("c", 2, 2), make_ranker("fifo"), PreemptionCost(0.0))
    assert [(sj.first_start, sj.end_time) for sj in r.jobs] == [
        (sj.first_start, sj.end_time) for sj in plain.jobs
    ]
    p = r.power
    # node 0: job 1 0-1000, idle 1000-2000; node 1: idle 0-500, job 2 500-600, idle 600-2000
    assert p["busy_j"] == pytest.approx(160 * 1000 + 250 * 100)
    assert p["idle_j"] == pytest.approx(40 * 1000 + 40 * 500 + 40 * 1400)
    assert p["power_cycles"] == p["boots"] == p["boot_wait_jobs"] == 0


def test_a_boot_delays_a_job_by_exactly_the_boot_time():
    res, _ = replay(TINY, "fixed:50")
    assert res[2].first_start == 500  # it holds its GPUs from its start ...
    assert res[2].end_time - res[2].submit == 100 + CFG.boot_seconds  # ... and waits the boot
    assert res[3].end_time - res[3].submit == 10 + CFG.boot_seconds
    assert res[1].end_time == 1000  # on a node that was on: no wait


def test_a_job_on_a_node_shutting_down_waits_the_rest_of_it_then_the_boot():
    # node 1 powers down at 50 and is off at 60: a job at 55 waits 5 s, then the boot
    res, r = replay([job(1, 1, 0, 1000), job(2, 2, 55, 100)], "fixed:50")
    assert res[2].end_time - res[2].submit == 100 + 5 + CFG.boot_seconds
    assert r.power["boot_wait_jobs"] == 1  # (its boot, at 60, is after the window)


def test_powered_nodes_are_preferred_over_powered_down_ones():
    from slurm_dl.sim.engine.placement import place_consolidated

    m = PowerModel(PowerSave("none", 0, CFG), [NodeSpec(0, 2, "")] * 3, ["g"], 0)
    m.power_down(1)
    m.advance(100, 0)  # node 1 off, nodes 0 and 2 on and idle

    def place(free):
        return place_consolidated(free, 2, 2)

    assert m.prefer(((1, 2),), [2, 2, 2], 0, place) == ((0, 2),)  # as Slurm: a powered one
    assert m.prefer(((1, 2),), [0, 2, 0], 0, place) == ((1, 2),)  # no powered fit: boot it
    assert m.prefer(((1, 2),), [2, 2], 1, place) == ((2, 2),)  # a group from node 1 on
    assert m.prefer(((0, 2),), [2, 2, 2], 0, place) == ((0, 2),)  # on already


def test_a_job_stopped_before_its_boot_ends_gives_the_rest_of_the_wait_back():
    m = PowerModel(PowerSave("fixed", 50, CFG), [NodeSpec(0, 2, "")], ["g"], 0.0)
    m.advance(70, 0)  # node 0 off since 60
    sj = SimJob(0, job(1, 2, 70, 100))
    m.took(((0, 2),))
    m.delay(sj, ((0, 2),), 70)
    assert sj.remaining == pytest.approx(100 + CFG.boot_seconds)
    sj.remaining -= 30  # preempted after 30 s of its wait
    m.stopped(sj, 100)
    assert sj.remaining == pytest.approx(100)
    assert m.wait_s == pytest.approx(30)


@pytest.mark.parametrize("name", ("fifo", "las", "fairshare", "combined"))
def test_power_save_none_leaves_the_replay_as_the_goldens_have_it(name):
    setup = SimSetup(
        gpus_per_node=8,
        nodes=3,
        cost=PreemptionCost(None),
        fairness=True,
        power=PowerSave("none", 0.0, PowerConfig()),
    )
    check(GOLDEN / f"synthetic-{name}.json", outcome(synthetic_trace(), name, setup))


def test_predictive_powers_nodes_down_and_never_sees_the_jobs_ahead():
    """Three quiet days of small jobs on 6 nodes, then the same with a burst on day 6: the
    first days' replay is the same whether or not the burst comes (the forecast learns from
    the replay so far)."""
    quiet = [job(i, 1, i * 3600.0, 1800) for i in range(72)]
    burst = [job(100 + i, 8, 5 * 86400.0 + i, 3600) for i in range(6)]
    cfg = PowerConfig(boot_seconds=300)
    a, ra = replay(quiet, "predictive", nodes=6, per_node=8, cfg=cfg)
    b, rb = replay(quiet + burst, "predictive", nodes=6, per_node=8, cfg=cfg)
    assert [(a[i].first_start, a[i].end_time) for i in range(72)] == [
        (b[i].first_start, b[i].end_time) for i in range(72)
    ]
    assert ra.power["off_node_s"] > 0 and ra.power["power_cycles"] > 0
    none, rn = replay(quiet, "none", nodes=6, per_node=8, cfg=cfg)
    assert ra.power["idle_j"] < 0.8 * rn.power["idle_j"]
    # the burst finds nodes off and waits for boots, each at most a shutdown and a boot
    waits = [b[j.job_id].end_time - j.submit_time - j.duration for j in burst]
    assert max(waits) > 0
    assert max(waits) <= cfg.boot_seconds + cfg.shutdown_seconds + 1e-6


def test_the_power_figures_cross_to_another_process():
    _, r = replay(TINY, "fixed:50")
    back = ClusterResult.unpacked(r.packed(), TINY)
    assert back.power == r.power


@pytest.mark.parametrize("bad", ["fixed:0", "fixed:abc", "fixed", "sometimes", "fixed:-5"])
def test_bad_power_save_names_the_option_and_what_is_allowed(bad):
    with pytest.raises(ValueError, match=r"--power-save: got .*allowed: none, fixed:SECONDS"):
        PowerSave.parse(bad, PowerConfig())


TRACE = "job_id,num_gpus,submit_time,duration,account\n" + "".join(
    f"{i},{1 + i % 2},{i * 900},{600 + 37 * i},{'ab'[i % 2]}\n" for i in range(30)
)


def _simulate(tmp_path, *extra):
    p = tmp_path / "t.csv"
    p.write_text(TRACE)
    args = ["simulate", "--trace", str(p), "--format", "csv", "--nodes", "4"]
    args += ["--gpus-per-node", "2", "--policy", "fifo", "--no-fairness", *extra]
    return CliRunner().invoke(app, args)


def test_the_command_adds_energy_to_the_json_entry_and_a_line_to_the_table(tmp_path):
    got = _simulate(tmp_path, "--power-save", "fixed:600", "--json")
    assert got.exit_code == 0, got.output
    s = json.loads(got.stdout)["policies"]["fifo"]
    assert s["power_save"] == "fixed:600"
    assert s["energy_kwh"] > s["idle_energy_kwh"] > 0
    assert s["power_cycles"] > 0
    plain = json.loads(_simulate(tmp_path, "--json").stdout)["policies"]["fifo"]
    assert "energy_kwh" not in plain
    none = json.loads(_simulate(tmp_path, "--power-save", "none", "--json").stdout)
    assert {k: v for k, v in none["policies"]["fifo"].items() if k in plain} == plain
    table = _simulate(tmp_path, "--power-save", "predictive")
    assert table.exit_code == 0, table.output
    line = [ln for ln in table.stdout.splitlines() if "power save predictive" in ln]
    assert line and "kWh" in line[0]
    assert all(len(ln) <= 80 for ln in table.stdout.splitlines())


def test_the_command_refuses_a_bad_power_save_before_reading_the_trace(tmp_path):
    got = CliRunner().invoke(
        app,
        ["simulate", "--trace", str(tmp_path / "absent.csv"), "--power-save", "sometimes"],
    )
    assert got.exit_code != 0
    assert "--power-save: got 'sometimes'" in got.output
    assert "Traceback" not in got.output


def test_several_gpu_types_count_each_types_watts():
    from slurm_dl.core.config.power import GpuWatts
    from slurm_dl.sim.engine.fleet import NodeGroupSpec

    cfg = CFG.model_copy(update={"gpu_types": {"v100": GpuWatts(busy_watts=200, idle_watts=20)}})
    spec = ClusterSpec.of_groups(
        "c", [NodeGroupSpec("v100", 1, 2, "v"), NodeGroupSpec("k80", 1, 2, "k")]
    )
    jobs = [job(1, 2, 0, 100), job(2, 2, 0, 100), job(3, 1, 200, 1)]
    r = run_cluster(
        jobs, spec, make_ranker("fifo"), PreemptionCost(0.0), power=PowerSave("none", 0, cfg)
    )
    # both nodes run a 2-GPU job 0-100, then idle to 200 (the window's end)
    assert r.power["busy_j"] == pytest.approx((50 + 2 * 200) * 100 + (50 + 2 * 100) * 100)
    assert r.power["idle_j"] == pytest.approx((20 + 2 * 20) * 100 + (20 + 2 * 10) * 100)
