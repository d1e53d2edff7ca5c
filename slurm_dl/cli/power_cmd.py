"""``slurm-dl power``: powering idle GPU nodes down ahead of demand. ``replay`` tries the
predictive policy on a recorded node-demand series."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import List, Optional

import typer

from ..core.config import PowerConfig
from ..core.errors import TraceError
from ..core.power.replay import (
    ReplayResult,
    replay_all_on,
    replay_idle_timeout,
    replay_predictive,
    step_series,
)
from .common import expected_errors

app = typer.Typer(
    help="""Power idle GPU nodes down ahead of demand.

    \b
    Examples:
      slurm-dl power replay --demand nodes.csv --train-until 2017-12-01
        --start 2017-12-01 --end 2017-12-15
    """,
    no_args_is_help=True,
)


def _date(value: str, option: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise TraceError(
            f"{option}: got {value!r}; need a date or time (YYYY-MM-DD[ HH:MM])"
        ) from None


@app.command("replay")
def replay(
    demand: Path = typer.Option(
        ..., "--demand", help="CSV of time,active,total: GPU nodes in use of all, per minute"
    ),
    train_until: str = typer.Option(
        ..., "--train-until", help="learn the forecast from the rows before this date"
    ),
    start: str = typer.Option(..., "--start", help="replay from this date"),
    end: str = typer.Option(..., "--end", help="replay until this date (not included)"),
    suspend_time: List[int] = typer.Option(
        [],
        "--suspend-time",
        min=1,
        help="also replay Slurm's fixed SuspendTime of this many seconds; repeat",
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", metavar="FILE", help="take [power] from this site config"
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Replay a recorded node-demand series through the predictive power policy.

    The series is cut into the planner's steps ([power] step_minutes, 10); a
    step's demand is the most nodes in use in it. Prints the nodes kept
    powered off on average (powered_off_mean), the node-steps where demand
    exceeded the powered nodes (short_node_intervals), and how often a day the
    number of powered nodes changed (changes_per_day); the same for keeping
    every node on and for each --suspend-time.

    \b
    Examples:
      slurm-dl power replay --demand nodes.csv --train-until 2017-12-01
        --start 2017-12-01 --end 2017-12-15 --suspend-time 3600
    """
    from ..sim.workloads.node_demand import read_node_demand

    with expected_errors():
        cfg = _power_config(config)
        points = read_node_demand(demand)
        tu, s, e = (
            _date(train_until, "--train-until"),
            _date(start, "--start"),
            _date(end, "--end"),
        )
        if not tu <= s < e:
            raise TraceError("need --train-until <= --start < --end")
        steps = step_series(points, cfg.step_minutes)
        try:
            ours = replay_predictive(steps, tu, s, e, cfg)
        except ValueError as err:
            raise TraceError(f"{demand}: {err}") from None
        others = [replay_all_on(steps, s, e, cfg.step_minutes)] + [
            replay_idle_timeout(steps, s, e, cfg.step_minutes, t) for t in suspend_time
        ]
    if as_json:
        out = {**ours.as_dict(), "baselines": [r.as_dict() for r in others]}
        typer.echo(json.dumps(out, indent=2))
        return
    _table([ours, *others])


def _power_config(path: Optional[Path]) -> PowerConfig:
    if path is None:
        return PowerConfig()
    from .config_file import load_config

    return load_config(path).power


def _table(rows: list[ReplayResult]) -> None:
    typer.echo(
        f"{'policy':<14}{'off (mean)':>11}{'powered':>9}{'in use':>8}"
        f"{'short node-steps':>18}{'changes/day':>13}"
    )
    for r in rows:
        typer.echo(
            f"{r.policy:<14}{r.powered_off_mean:>11.1f}{r.powered_mean:>9.1f}"
            f"{r.active_mean:>8.1f}{r.short_node_intervals:>18}{r.changes_per_day:>13.2f}"
        )
    r = rows[0]
    typer.echo(
        f"{r.steps} steps over {r.days:g} days; demand above the powered nodes in "
        f"{r.short_intervals} {'step' if r.short_intervals == 1 else 'steps'}"
    )
