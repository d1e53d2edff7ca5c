"""The what-if's goals as deployed, side by side in one run: every replay under the shipped
default site config (no --config: the default config on the cluster named here, as a site that
sets nothing else runs it: its LAS, its guards, its restart delay), through the same code path
as ``slurm-dl simulate``.

Parts (``--part`` repeatable, default all):
  fairness  heavy Philly as one cluster of ``--fairness-nodes`` × 8 GPUs (2017-10-01 to
            ``--philly-end``): las, fairshare and the default mix (site). Goal: per-job ρ p99
            ≤ 2.0 at ≤ 1.10× LAS's average and ≤ 1.5× LAS's median JCT.
  deadlines Chronus MIX1 and SLO on 40 × 8 and 160 × 8: las, deadline-las and site. Goals at
            40 × 8: strict misses ≥ 5× fewer than LAS, utility ≥ LAS + 15 points, best-effort
            JCT ≤ 1.2× LAS; at 160 × 8: ≥ 99.5 % strict met, best effort ≤ 1.02× LAS.
  types     Philly 2017-10-01 to 2017-12-01 on 15 nodes × 8 each of v100, p100 and k80 with
            Gavel's throughputs (models drawn, seed 0), LAS under each type choice: blind in
            every node order (the best counts), fastest, constrained, and aware on oracle
            speeds (each job's exact model row: an upper bound) and on learned speeds (as the
            prioritizer learns them from the runs finished so far: the default). Goal:
            learned aware ≤ 0.75× the best of blind, fastest and constrained.

Prints one JSON object, then a human line per goal (met or not, with the figures).
``--write-results docs/results.md`` rewrites that file's as-deployed tables from the run (see
``results_tables.py``), so a published figure is always one measured.
Usage: python benchmarks/bench_as_deployed.py [--part deadlines] [--philly-end 2017-10-15]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from slurm_dl.cli.config_file import load_config
from slurm_dl.sim.whatif.run import Options, run

from bench_sim_policies import traces_dir  # noqa: E402 - where the traces are


class _Quiet:
    def say(self, text: str) -> None:
        pass

    def alert(self, text: str) -> None:
        print(text, file=sys.stderr)

    def run_done(self, whatif, run) -> None:
        pass


def replay(trace: Path, fmt: str, policies: list[str], **options) -> tuple[dict, float]:
    """Each policy's summary under the default config, and the CPU seconds it took."""
    runs, cpu, _ = timed_replay(trace, fmt, policies, **options)
    return runs, cpu


def timed_replay(trace: Path, fmt: str, policies: list[str], **options):
    """:func:`replay`, and the wall seconds it took too."""
    t0, w0 = time.process_time(), time.perf_counter()
    o = Options(trace=trace, fmt=fmt, policy=policies, quiet=True, workers=1, **options)
    w = run(o, _Quiet(), load_config)
    assert w.doc["config"] == {"path": None, "overrides": []}, w.doc["config"]
    # "site: combined" is the default config's own mix: "site" here
    runs = {k.split(":")[0]: v for k, v in w.doc["policies"].items()}
    return runs, time.process_time() - t0, time.perf_counter() - w0


def _r(x, d=4):
    return None if x is None else round(x, d)


def fairness(T: Path, nodes: int, end: str) -> dict:
    runs, cpu = replay(
        T / "philly" / "philly.csv",
        "philly",
        ["las", "fairshare", "site"],
        start="2017-10-01",
        end=end,
        nodes=nodes,
        gpus_per_node=8,
    )
    las = runs["las"]
    out = {"cpu_s": round(cpu, 1), "nodes": nodes, "end": end, "policies": {}}
    for name, s in runs.items():
        out["policies"][name] = {
            "avg_jct_s": round(s["avg_jct_s"]),
            "median_jct_s": round(s["median_jct_s"]),
            "avg_vs_las": _r(s["avg_jct_s"] / las["avg_jct_s"]),
            "median_vs_las": _r(s["median_jct_s"] / las["median_jct_s"]),
            "job_rho_p50": _r(s["job_rho_p50"]),
            "job_rho_p99": _r(s["job_rho_p99"]),
            "job_rho_max": _r(s["job_rho_max"], 1),
            "worst_account_rho": _r(s.get("max_rho")),
            "preemptions_per_job": _r(s["preemptions_per_job"]),
        }
    for name in ("fairshare", "site"):
        p = out["policies"][name]
        p["goal_met"] = (
            p["job_rho_p99"] <= 2.0 and p["avg_vs_las"] <= 1.10 and p["median_vs_las"] <= 1.5
        )
    return out


def deadlines(T: Path) -> dict:
    out = {}
    for trace in ("MIX1", "SLO"):
        for nodes in (40, 160):
            runs, cpu = replay(
                T / "chronus" / f"trace_job_Philly_{trace}.csv",
                "chronus",
                ["las", "deadline-las", "site"],
                nodes=nodes,
                gpus_per_node=8,
                no_fairness=True,
            )
            las = runs["las"]
            row = {"cpu_s": round(cpu, 1), "policies": {}}
            for name, s in runs.items():
                miss = s.get("deadline_miss_rate")
                be = s.get("best_effort_avg_jct_s")
                p = {
                    "strict_miss_rate": _r(miss),
                    "misses_fewer_than_las": _r(las["deadline_miss_rate"] / miss, 2)
                    if miss
                    else None,
                    "utility_points": _r(100 * s.get("utility_fraction", 0.0), 2),
                    "best_effort_vs_las": _r(be / las["best_effort_avg_jct_s"])
                    if be and las.get("best_effort_avg_jct_s")
                    else None,
                }
                if name != "las":
                    lu = 100 * las.get("utility_fraction", 0.0)
                    be_ok = p["best_effort_vs_las"] is None or (
                        p["best_effort_vs_las"] <= (1.2 if nodes == 40 else 1.02)
                    )
                    if nodes == 40:
                        fewer = p["misses_fewer_than_las"]
                        p["goal_met"] = (
                            (fewer is None or fewer >= 5.0)
                            and p["utility_points"] >= lu + 15
                            and be_ok
                        )
                    else:
                        p["goal_met"] = (1 - (miss or 0.0)) >= 0.995 and be_ok
                row["policies"][name] = p
            out[f"{trace}@{nodes}x8"] = row
    return out


TYPES = ("v100", "p100", "k80")
BASELINES = ("blind", "fastest", "constrained")


def typed_philly(T: Path) -> tuple[Path, str]:
    """The trace of the GPU-type parts (its file and format)."""
    return T / "philly" / "philly.csv", "philly"


def typed_options(T: Path, order) -> dict:
    """The GPU-type parts' window and cluster: 15 nodes of 8 GPUs per type, in ``order``,
    with Gavel's throughputs and models drawn with seed 0."""
    return {
        "start": "2017-10-01",
        "end": "2017-12-01",
        "node_types": ",".join(f"{t}:15" for t in order),
        "gpus_per_node": 8,
        "throughputs": T / "gavel" / "simulation_throughputs.json",
        "model_seed": 0,
    }


def types(T: Path) -> dict:
    rows: dict[str, dict] = {}
    cpu = 0.0

    def one(name: str, order: tuple[str, ...], choice: str, speeds: str | None = None) -> None:
        nonlocal cpu
        got, c, wall = timed_replay(
            *typed_philly(T),
            ["las"],
            **typed_options(T, order),
            type_choice=choice,
            speeds=speeds,
            no_fairness=True,
        )
        s = got["las"]
        rows[name] = {
            "avg_jct_s": round(s["avg_jct_s"]),
            "median_jct_s": round(s["median_jct_s"]),
            "node_order": ",".join(order),
            "cpu_s": round(c, 1),
            "wall_s": round(wall, 1),
        }
        cpu += c

    for order in itertools.permutations(TYPES):
        one("blind " + ",".join(order), order, "blind")
    one("fastest", TYPES, "fastest")
    one("constrained", TYPES, "constrained")
    one("aware-oracle", TYPES, "aware", "oracle")
    one("aware-learned", TYPES, "aware", "learned")
    blind = min((k for k in rows if k.startswith("blind")), key=lambda k: rows[k]["avg_jct_s"])
    cands = [blind, "fastest", "constrained"]
    best = min(cands, key=lambda k: rows[k]["avg_jct_s"])
    ref = rows[best]["avg_jct_s"]
    for r in rows.values():
        r["vs_best_baseline"] = _r(r["avg_jct_s"] / ref)
    learned = rows["aware-learned"]["avg_jct_s"]
    return {
        "cpu_s": round(cpu, 1),
        "rows": rows,
        "best_blind": blind,
        "best_baseline": best,
        "learned_vs_best_baseline": rows["aware-learned"]["vs_best_baseline"],
        "oracle_vs_best_baseline": rows["aware-oracle"]["vs_best_baseline"],
        "goal_met": learned <= 0.75 * ref,
    }


def type_fairness(T: Path) -> dict:
    """Fair share on the three types (as ``types``, aware on learnt speeds): the worst
    per-account rho over the accounts whose isolated mean JCT is at least 600 s."""
    runs, cpu = replay(
        *typed_philly(T),
        ["las", "fairshare"],
        **typed_options(T, TYPES),
        type_choice="aware",
    )
    las = runs["las"]
    out: dict = {"cpu_s": round(cpu, 1), "min_isolated_jct_s": 600, "policies": {}}
    for name, s in runs.items():
        counted = {
            a: r["rho"]
            for a, r in s["per_account"].items()
            if (r.get("isolated_avg_jct_s") or 0) >= 600 and r.get("rho") is not None
        }
        worst = max(counted, key=counted.get)
        out["policies"][name] = {
            "avg_jct_s": round(s["avg_jct_s"]),
            "avg_vs_las": _r(s["avg_jct_s"] / las["avg_jct_s"]),
            "worst_account_rho": _r(counted[worst]),
            "worst_account": worst,
            "accounts": len(counted),
            "job_rho_p99": _r(s["job_rho_p99"]),
        }
    out["goal_met"] = out["policies"]["fairshare"]["worst_account_rho"] <= 1.2
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--part", action="append", choices=("fairness", "deadlines", "types", "typefair")
    )
    ap.add_argument("--fairness-nodes", type=int, default=44)
    ap.add_argument("--philly-end", default="2017-12-01")
    ap.add_argument("--traces", help="the traces' folder (default: ../shared/traces)")
    ap.add_argument(
        "--write-results",
        type=Path,
        metavar="MD",
        help="rewrite the as-deployed tables of this file (docs/results.md) from this run, "
        "and save the run's parts in benchmarks/results/as_deployed.json",
    )
    a = ap.parse_args()
    T = traces_dir(a.traces)
    parts = a.part or ["fairness", "deadlines", "types", "typefair"]
    doc: dict = {"config": "the shipped defaults (no --config)"}
    if "fairness" in parts:
        doc["fairness"] = fairness(T, a.fairness_nodes, a.philly_end)
    if "deadlines" in parts:
        doc["deadlines"] = deadlines(T)
    if "types" in parts:
        doc["types"] = types(T)
    if "typefair" in parts:
        doc["typefair"] = type_fairness(T)
    print(json.dumps(doc))
    if "typefair" in doc:
        f = doc["typefair"]
        p = f["policies"]["fairshare"]
        print(
            f"types fairness: fairshare worst account rho {p['worst_account_rho']} over "
            f"{p['accounts']} accounts (goal <= 1.2; LAS "
            f"{f['policies']['las']['worst_account_rho']}), avg {p['avg_vs_las']}x LAS: "
            f"{'met' if f['goal_met'] else 'NOT met'}"
        )
    if a.write_results is not None:
        import results_tables

        record = results_tables.merge_record(doc)
        md = a.write_results
        md.write_text(results_tables.rewrite(md.read_text(), record))
        print(f"rewrote the as-deployed tables of {md}", file=sys.stderr)
    if "fairness" in doc:
        f = doc["fairness"]
        for name in ("fairshare", "site"):
            p = f["policies"][name]
            print(
                f"fairness {f['nodes']}x8 {name}: per-job rho p99 {p['job_rho_p99']} (goal <= 2.0), "
                f"avg {p['avg_vs_las']}x LAS (<= 1.10), median {p['median_vs_las']}x LAS "
                f"(<= 1.5): {'met' if p['goal_met'] else 'NOT met'}"
            )
    for key, row in doc.get("deadlines", {}).items():
        for name in ("deadline-las", "site"):
            p = row["policies"][name]
            print(
                f"deadlines {key} {name}: misses {p['strict_miss_rate']} "
                f"({p['misses_fewer_than_las']}x fewer than LAS), utility {p['utility_points']} "
                f"points (LAS {row['policies']['las']['utility_points']}), best effort "
                f"{p['best_effort_vs_las']}x LAS: {'met' if p['goal_met'] else 'NOT met'}"
            )
    if "types" in doc:
        t = doc["types"]
        for name, r in t["rows"].items():
            if name.startswith("blind") and name != t["best_blind"]:
                continue
            print(
                f"types {name}: avg JCT {r['avg_jct_s'] / 3600:.2f} h, "
                f"{r['vs_best_baseline']}x the best baseline, {r['wall_s']} s"
            )
        print(
            f"types: learned aware LAS {t['learned_vs_best_baseline']}x the best baseline "
            f"({t['best_baseline']}; goal <= 0.75; oracle {t['oracle_vs_best_baseline']}x): "
            f"{'met' if t['goal_met'] else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
