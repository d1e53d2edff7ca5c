"""The power planner: the demand forecast, the decision of which nodes to keep powered, and the
replay of a recorded node-demand series (counts checked on small hand-made series)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_dl.core.config import PowerConfig, parse_config
from slurm_dl.core.errors import ConfigError
from slurm_dl.core.power import NodeState, Power, decide, fit_demand_model, forecast_peak
from slurm_dl.core.power.replay import (
    DemandPoint,
    replay_all_on,
    replay_idle_timeout,
    replay_predictive,
    step_series,
)

T0 = datetime(2024, 1, 1)
ON = PowerConfig(enabled=True, buffer_nodes=2, buffer_fraction=0, min_powered_nodes=1)


def _nodes(n: int, busy: int = 0, off: int = 0) -> list[NodeState]:
    return [
        NodeState(
            f"g{i:02d}",
            Power.OFF if i >= n - off else Power.ON,
            busy=i < busy,
        )
        for i in range(n)
    ]


def test_forecast_adds_the_rise_seen_at_this_hour() -> None:
    # every day: 10 nodes until 08:00, 30 from then on; a 2-hour look-ahead
    times = [T0 + timedelta(minutes=10 * i) for i in range(6 * 24 * 14)]
    demand = [30 if 8 <= t.hour else 10 for t in times]
    model = fit_demand_model(times, demand, horizon_steps=12, quantile=0.8)
    at_seven = forecast_peak(model, [10] * 12, datetime(2024, 2, 1, 7, 0))
    at_noon = forecast_peak(model, [30] * 12, datetime(2024, 2, 1, 12, 0))
    assert at_seven == 30  # the 08:00 rise is within two hours of 07:00
    assert at_noon == 30  # no rise past noon: the level seen now


def test_forecast_needs_enough_history() -> None:
    with pytest.raises(ValueError, match="need at least"):
        fit_demand_model([T0, T0], [1, 2], horizon_steps=6, quantile=0.8)


def test_work_waiting_powers_up_at_once() -> None:
    d = decide("g", _nodes(10, busy=4, off=6), waiting_nodes=3, forecast=0, cfg=ON, now=T0)
    assert d.reason == "power up: work waits"
    assert len(d.power_up) == 5  # demand 7 + buffer 2 = 9 powered, 4 now
    assert d.target == 9


def test_power_down_keeps_buffer_and_then_holds() -> None:
    d = decide("g", _nodes(10, busy=3), waiting_nodes=0, forecast=3, cfg=ON, now=T0)
    assert d.target == 5 and len(d.power_down) == 5 and d.last_down == T0
    assert set(d.power_down).isdisjoint({"g00", "g01", "g02"})  # the busy ones stay
    nodes = [
        NodeState(n.name, Power.OFF if n.name in d.power_down else n.power, busy=n.busy)
        for n in _nodes(10, busy=1)
    ]
    later = decide("g", nodes, 0, 1, ON, T0 + timedelta(hours=1), d.last_down)
    assert later.target == 5 and not later.changed  # held for forecast_hours
    free = decide("g", nodes, 0, 1, ON, T0 + timedelta(hours=9), d.last_down)
    assert free.target == 3


def test_disabled_powers_everything_up() -> None:
    d = decide("g", _nodes(4, off=2), 0, 0, PowerConfig(), T0)
    assert d.power_up == ("g02", "g03") and not d.power_down


@settings(max_examples=200, deadline=None)
@given(
    spec=st.lists(
        st.tuples(st.booleans(), st.booleans(), st.booleans(), st.integers(0, 3)),
        min_size=1,
        max_size=30,
    ),
    waiting=st.integers(0, 40),
    forecast=st.floats(0, 40),
    minimum=st.integers(0, 35),
    budget=st.integers(0, 3),
    held=st.booleans(),
)
def test_decision_properties(spec, waiting, forecast, minimum, budget, held) -> None:
    nodes = [
        NodeState(f"n{i}", Power.ON if on else Power.OFF, busy=on and b, reserved=r, cycles_today=c)
        for i, (on, b, r, c) in enumerate(spec)
    ]
    cfg = PowerConfig(enabled=True, min_powered_nodes=minimum, max_cycles_per_node_per_day=budget)
    last = T0 - timedelta(hours=1) if held else None
    d = decide("g", nodes, waiting, forecast, cfg, T0, last)
    by = {n.name: n for n in nodes}
    assert not (set(d.power_up) & set(d.power_down))
    for name in d.power_down:
        n = by[name]
        assert n.power is Power.ON and not n.busy and not n.reserved
        assert n.cycles_today < budget
    for name in d.power_up:
        assert by[name].power is Power.OFF
    powered = sum(1 for n in nodes if n.power is Power.ON)
    assert d.target == powered + len(d.power_up) - len(d.power_down)
    assert d.target >= min(minimum, len(nodes))  # never below the minimum
    if d.power_down:
        assert not held
    busy = sum(1 for n in nodes if n.busy)
    if busy + waiting > powered:
        assert d.target == min(len(nodes), max(d.wanted, powered))  # all it can, at once


def _series(values: list[int], total: int = 10, step: int = 10) -> list[DemandPoint]:
    return [DemandPoint(T0 + timedelta(minutes=step * i), v, total) for i, v in enumerate(values)]


def test_step_series_takes_the_most_in_each_step() -> None:
    pts = _series([1, 5, 2, 3, 9, 0, 4, 4, 4, 4, 4, 8], step=1)
    steps = step_series(pts, 10)
    assert [(p.time.minute, p.active) for p in steps] == [(0, 9), (10, 8)]


def test_fixed_timeout_counts_on_a_known_series() -> None:
    # demand per step: 2 2 6 6 2 2 2 2; timeout = 2 steps (1200 s): powered = most of the
    # last two steps before each one
    steps = _series([2, 2, 2, 6, 6, 2, 2, 2, 2])
    r = replay_idle_timeout(steps, steps[1].time, steps[-1].time + timedelta(minutes=1), 10, 1200)
    # steps 1..8: demand 2 2 6 6 2 2 2 2, powered 2 2 2 6 6 6 2 2
    assert r.steps == 8
    assert r.short_intervals == 1 and r.short_node_intervals == 4  # step 3: 6 wanted, 2 on
    assert r.changes == 2  # 2 -> 6 and 6 -> 2
    assert r.powered_off_mean == pytest.approx((8 + 8 + 8 + 4 + 4 + 4 + 8 + 8) / 8)
    on = replay_all_on(steps, steps[1].time, steps[-1].time + timedelta(minutes=1), 10)
    assert on.powered_off_mean == 0 and on.short_node_intervals == 0 and on.changes == 0


def test_predictive_replay_on_a_known_series() -> None:
    # three flat days of 3 busy nodes of 20 to learn from, then a day of 3 then a jump to 12
    days = 4
    values = [3] * (144 * days)
    jump = 144 * 3 + 72  # noon of the last day
    values[jump:] = [12] * (len(values) - jump)
    steps = _series(values, total=20)
    cfg = PowerConfig(buffer_nodes=2, buffer_fraction=0, forecast_hours=8)
    start = steps[144 * 3].time
    r = replay_predictive(steps, start, start, steps[-1].time + timedelta(minutes=1), cfg)
    # first step: forecast 3 + buffer 2 = 5 powered of the 20 on before (one change); the
    # jump to 12 finds 5 on (7 node-steps short), the next step powers up to 14 (second)
    assert r.steps == 144
    assert r.short_intervals == 1 and r.short_node_intervals == 7
    assert r.changes == 2
    assert r.powered_mean == pytest.approx((5 * 73 + 14 * 71) / 144)
    assert r.max_node_cycles_per_day == 1


def test_config_section_defaults_off_and_checks_types() -> None:
    base = {
        "gpu_types": [{"name": "h100"}],
        "node_groups": [{"name": "g", "nodes": "g[1-2]", "gpus_per_node": 8, "gpu_type": "h100"}],
    }
    cfg = parse_config(base)
    assert cfg.power.enabled is False
    assert cfg.power.gpu_watts("h100").busy_watts == cfg.power.gpu_busy_watts
    with pytest.raises(ConfigError, match="power.gpu_types.a100"):
        parse_config({**base, "power": {"gpu_types": {"a100": {"busy_watts": 400}}}})
    with pytest.raises(ConfigError, match="gpu_busy_watts"):
        parse_config({**base, "power": {"gpu_busy_watts": 10, "gpu_idle_watts": 50}})


def _csv(path, values: list[int], total: int = 20) -> None:
    rows = ["time,active,total"] + [
        f"{(T0 + timedelta(minutes=10 * i)):%Y-%m-%d %H:%M:%S},{v},{total}"
        for i, v in enumerate(values)
    ]
    path.write_text("\n".join(rows) + "\n")


def test_power_replay_command_prints_the_counts(tmp_path) -> None:
    from typer.testing import CliRunner

    from slurm_dl.cli.main import app

    values = [3] * (144 * 4)
    values[144 * 3 + 72 :] = [12] * 72
    _csv(tmp_path / "d.csv", values)
    args = ["power", "replay", "--demand", str(tmp_path / "d.csv"), "--train-until"]
    args += ["2024-01-04", "--start", "2024-01-04", "--end", "2024-01-05"]
    res = CliRunner().invoke(app, [*args, "--json", "--suspend-time", "1200"])
    assert res.exit_code == 0, res.output
    out = __import__("json").loads(res.output)
    assert out["short_node_intervals"] == 7 and out["changes"] == 2
    assert out["changes_per_day"] == pytest.approx(2.0)
    assert [b["policy"] for b in out["baselines"]] == ["all-on", "fixed:1200"]
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0 and "predictive" in table.output
    assert all(len(line) <= 80 for line in table.output.splitlines())


def test_power_replay_names_a_bad_row(tmp_path) -> None:
    from typer.testing import CliRunner

    from slurm_dl.cli.main import app

    (tmp_path / "d.csv").write_text("time,active,total\n2024-01-01 00:00:00,30,20\n")
    args = ["power", "replay", "--demand", str(tmp_path / "d.csv"), "--train-until"]
    res = CliRunner().invoke(
        app, [*args, "2024-01-01", "--start", "2024-01-01", "--end", "2024-01-02"]
    )
    assert res.exit_code == 1
    assert "d.csv:2: active 30 of total 20" in res.output
