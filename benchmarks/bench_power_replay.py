"""The predictive power policy against Helios's CES and Slurm's fixed SuspendTime, on the
Philly node-demand series (ces/philly_node_sequence.csv), at 10-minute steps, with the shipped
[power] defaults.

For each window (the forecast learnt from every step before it) it replays the predictive policy,
keeping every node on, and fixed SuspendTime values (a node idle that long powers down; work that
finds too few nodes powers them up at once). A step's demand is the most nodes in use in any of
its minutes; ``short_node_intervals`` sums, over the steps, how many nodes demand exceeded the
powered ones by; a change is a step at which the number of powered nodes differs from the step
before (the first power-down from all-on counts). CES's figures are published for the December
window only (94.2 nodes off, 36 short node-intervals, 2.4 changes a day).
Prints one JSON object and one human line per window.
Usage: python benchmarks/bench_power_replay.py [--traces DIR] [--suspend 600,1800,3600,7200]
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from slurm_dl.core.config import PowerConfig
from slurm_dl.core.power.replay import (
    replay_all_on,
    replay_idle_timeout,
    replay_predictive,
    step_series,
)
from slurm_dl.sim.workloads.node_demand import read_node_demand

from bench_sim_policies import traces_dir  # noqa: E402 - where the traces are

CES = {"powered_off_mean": 94.2, "short_node_intervals": 36, "changes_per_day": 2.4}
WINDOWS = [  # (start, end): trained on everything before start
    ("2017-12-01", "2017-12-15"),  # the window CES published
    ("2017-11-15", "2017-11-29"),
    ("2017-11-01", "2017-11-15"),
    ("2017-10-17", "2017-10-31"),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces")
    ap.add_argument("--suspend", default="600,1800,3600,7200", help="SuspendTime values, s")
    a = ap.parse_args()
    path = traces_dir(a.traces) / "ces" / "philly_node_sequence.csv"
    if not path.is_file():
        print(json.dumps({"skipped": f"no series at {path}"}))
        return 0
    cfg = PowerConfig()  # the shipped defaults
    steps = step_series(read_node_demand(path), cfg.step_minutes)
    suspend = [int(s) for s in a.suspend.split(",") if s]
    out: dict[str, object] = {"ces_2017_12_01": CES, "windows": {}}
    lines = []
    for start, end in WINDOWS:
        s, e = datetime.fromisoformat(start), datetime.fromisoformat(end)
        ours = replay_predictive(steps, s, s, e, cfg)
        rows = [ours, replay_all_on(steps, s, e, cfg.step_minutes)]
        rows += [replay_idle_timeout(steps, s, e, cfg.step_minutes, t) for t in suspend]
        out["windows"][f"{start}..{end}"] = [r.as_dict() for r in rows]
        ref = CES if start == "2017-12-01" else None
        best_fixed = min(rows[2:], key=lambda r: r.short_node_intervals)
        lines.append(
            f"{start}..{end}: predictive {ours.powered_off_mean:.1f} of "
            f"{rows[1].powered_mean:.0f} off, {ours.short_node_intervals} short node-steps, "
            f"{ours.changes_per_day:.2f} changes/day"
            + (
                f" | CES {ref['powered_off_mean']} off, {ref['short_node_intervals']} short,"
                f" {ref['changes_per_day']}/day"
                if ref
                else ""
            )
            + f" | best fixed ({best_fixed.policy}) {best_fixed.powered_off_mean:.1f} off, "
            f"{best_fixed.short_node_intervals} short, {best_fixed.changes_per_day:.1f}/day"
        )
    print(json.dumps(out))
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
