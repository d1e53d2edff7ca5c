"""Power saving in the what-if: heavy Philly (quarter-size VCs, each VC its own cluster of
8-GPU nodes, 2017-10-01 to 2017-12-01), the shipped default site config (no --config: its
policy mix, its restart delay, its ``[power]`` model and planner settings), replayed under
``--power-save`` none (the baseline, in the same run), fixed:600, fixed:1800, fixed:3600
(Slurm's SuspendTime) and predictive, through the same code path as ``slurm-dl simulate``.

Goal: predictive uses <= 0.6x the idle energy of none at <= 1.01x its average JCT, and beats
every fixed SuspendTime on idle energy and average JCT at once.

``--sensitivity`` adds predictive rows with other ``[power]`` planner settings (labelled as
sensitivity rows, not the shipped defaults): no buffer, and no buffer with a 2-hour look-ahead.

Prints one JSON object, then one human line.
Usage: python benchmarks/bench_sim_power.py [--end 2017-12-01] [--mode predictive ...]
       [--sensitivity]
"""

from __future__ import annotations

import argparse
import json
import time

from pathlib import Path

from bench_as_deployed import _Quiet, timed_replay  # noqa: E402 - the as-deployed replay
from bench_sim_policies import traces_dir  # noqa: E402 - where the traces are

MODES = ("none", "fixed:600", "fixed:1800", "fixed:3600", "predictive")
KEYS = (
    "energy_kwh",
    "idle_energy_kwh",
    "kwh_per_gpu_hour",
    "gpu_hours",
    "powered_off_node_hours",
    "power_cycles",
    "boots",
    "boot_wait_jobs",
    "boot_jct_s_per_job",
)


SENSITIVITY = {
    "predictive, buffer 0": {"buffer_nodes": 0, "buffer_fraction": 0.0},
    "predictive, buffer 0, look-ahead 2 h": {
        "buffer_nodes": 0,
        "buffer_fraction": 0.0,
        "forecast_hours": 2.0,
    },
}


def sensitivity(T, end: str, policy: str, base: dict) -> dict:
    """Predictive rows under other [power] planner settings: the default config with only
    those changed (given as a config, so the run is labelled by it)."""
    from slurm_dl.core.config import cluster_only, parse_config
    from slurm_dl.sim.whatif.run import Options, run as whatif

    rows = {}
    for label, update in SENSITIVITY.items():

        def load(_path, update=update):
            cfg = parse_config(cluster_only(1, 8), "the default config")
            return cfg.model_copy(update={"power": cfg.power.model_copy(update=update)})

        t0 = time.perf_counter()
        o = Options(
            trace=T / "philly" / "philly.csv",
            fmt="philly",
            policy=[policy],
            quiet=True,
            workers=1,
            start="2017-10-01",
            end=end,
            cluster_per_vc=T / "philly" / "vc_sizes_quarter.csv",
            gpus_per_node=8,
            power_save="predictive",
            config=[Path("sensitivity.toml")],
        )
        s = next(iter(whatif(o, _Quiet(), load).doc["policies"].values()))
        rows[label] = {
            "power": update,
            "avg_jct_s": round(s["avg_jct_s"], 1),
            **{k: round(s[k], 4) if isinstance(s[k], float) else s[k] for k in KEYS},
            "wall_s": round(time.perf_counter() - t0, 1),
            "idle_vs_none": round(s["idle_energy_kwh"] / base["idle_energy_kwh"], 4),
            "jct_vs_none": round(s["avg_jct_s"] / base["avg_jct_s"], 5),
        }
    return rows


def run(T, end: str, modes: list[str], policy: str) -> dict:
    rows = {}
    for mode in modes:
        got, cpu, wall = timed_replay(
            T / "philly" / "philly.csv",
            "philly",
            [policy],
            start="2017-10-01",
            end=end,
            cluster_per_vc=T / "philly" / "vc_sizes_quarter.csv",
            gpus_per_node=8,
            power_save=mode,
        )
        s = got[policy]
        rows[mode] = {
            "avg_jct_s": round(s["avg_jct_s"], 1),
            **{k: round(s[k], 4) if isinstance(s[k], float) else s[k] for k in KEYS},
            "cpu_s": round(cpu, 1),
            "wall_s": round(wall, 1),
        }
    base = rows.get("none")
    if base is not None:
        for r in rows.values():
            r["idle_vs_none"] = round(r["idle_energy_kwh"] / base["idle_energy_kwh"], 4)
            r["energy_vs_none"] = round(r["energy_kwh"] / base["energy_kwh"], 4)
            r["jct_vs_none"] = round(r["avg_jct_s"] / base["avg_jct_s"], 5)
    return rows


def goal(rows: dict) -> dict | None:
    p = rows.get("predictive")
    if p is None or "none" not in rows:
        return None
    fixed = {k: r for k, r in rows.items() if k.startswith("fixed:")}
    beats = {
        k: p["idle_energy_kwh"] < r["idle_energy_kwh"] and p["avg_jct_s"] < r["avg_jct_s"]
        for k, r in fixed.items()
    }
    return {
        "idle_vs_none": p["idle_vs_none"],
        "jct_vs_none": p["jct_vs_none"],
        "idle_ok": p["idle_vs_none"] <= 0.6,
        "jct_ok": p["jct_vs_none"] <= 1.01,
        "beats_fixed": beats,
        "met": p["idle_vs_none"] <= 0.6 and p["jct_vs_none"] <= 1.01 and all(beats.values()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--end", default="2017-12-01", help="last submission (exclusive)")
    ap.add_argument("--mode", action="append", help="a --power-save mode (repeatable)")
    ap.add_argument("--traces", help="the traces folder (default: ../shared/traces)")
    ap.add_argument("--sensitivity", action="store_true", help="add the sensitivity rows")
    ap.add_argument("--policy", default="site", help="the policy (default: the config's mix)")
    a = ap.parse_args()
    modes = a.mode or list(MODES)
    if "none" not in modes:
        modes.insert(0, "none")
    t0 = time.perf_counter()
    rows = run(traces_dir(a.traces), a.end, modes, a.policy)
    g = goal(rows)
    sens = (
        sensitivity(traces_dir(a.traces), a.end, a.policy, rows["none"]) if a.sensitivity else None
    )
    doc = {
        "setup": f"Philly 2017-10-01 to {a.end}, quarter VCs, 8 GPUs per node, default config, "
        f"policy {a.policy}",
        "rows": rows,
        "goal": g,
        "sensitivity": sens,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(doc))
    human = "; ".join(
        f"{k} idle {r['idle_vs_none']:.2f}x JCT {r['jct_vs_none']:.4f}x" for k, r in rows.items()
    )
    if g is not None:
        human += f" — goal {'met' if g['met'] else 'NOT met'}"
    print(human)


if __name__ == "__main__":
    main()
