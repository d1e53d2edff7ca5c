"""The as-deployed tables of docs/results.md, written from what bench_as_deployed.py measured.

Each table sits between ``<!-- as-deployed:PART -->`` and ``<!-- /as-deployed:PART -->`` (PART:
fairness, deadlines, types, typefair) and is rewritten whole from the run's JSON, so a figure there is
always one the benchmark printed. ``bench_as_deployed.py --write-results docs/results.md`` runs
the replays and calls this; ``python results_tables.py --from RECORD --write docs/results.md``
rewrites the tables from a saved record (``benchmarks/results/as_deployed.json``) without
replaying.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

PARTS = ("fairness", "deadlines", "types", "typefair")
RECORD = Path(__file__).resolve().parent / "results" / "as_deployed.json"


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def _n(x: float | None, d: int = 3) -> str:
    if x is None:
        return "–"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.{d}f}"


def _sig(x: float | None) -> str:
    """Four significant figures at most (a ρ of 34.79, 1.052, 1,472)."""
    if x is None or abs(x) >= 1000:
        return _n(x)
    digits = len(str(int(abs(x)))) if abs(x) >= 1 else 1
    return f"{x:.{4 - digits}f}"


def fairness(part: dict) -> str:
    rows = [
        "| policy | average JCT | × LAS | median | × LAS | per-job ρ p50 / p99 / max "
        "| worst account ρ | preemptions per job |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = {"site": "`site` (`combined`)"}
    for name, p in part["policies"].items():
        rho = " / ".join(
            (_n(p["job_rho_p50"], 2), _n(p["job_rho_p99"], 1), _n(p["job_rho_max"], 0))
        )
        rows.append(
            f"| {names.get(name, f'`{name}`')} | {_h(p['avg_jct_s'])} | {_n(p['avg_vs_las'])} "
            f"| {_h(p['median_jct_s'])} | {_n(p['median_vs_las'])} | {rho} "
            f"| {_sig(p['worst_account_rho'])} | {_n(p['preemptions_per_job'])} |"
        )
    return "\n".join(rows)


def deadlines(part: dict) -> str:
    rows = [
        "| trace, cluster | policy | strict misses | × fewer than LAS | best-effort JCT × LAS "
        "| utility (points) |",
        "|---|---|---|---|---|---|",
    ]
    for key, row in part.items():
        trace, size = key.split("@")
        label = f"{trace}, {size.replace('x', ' × ')}"
        for name, p in row["policies"].items():
            miss = p["strict_miss_rate"]
            rows.append(
                f"| {label} | `{name}` | {100 * miss:.2f} % | {_n(p['misses_fewer_than_las'], 2)} "
                f"| {_n(p['best_effort_vs_las'])} | {p['utility_points']:.2f} |"
            )
            label = ""
    return "\n".join(rows)


_CHOICES = {
    "fastest": "fastest free type first",
    "constrained": "constrained (types at least half the job's best speed, then first free)",
    "aware-oracle": "aware, exact per-model speeds (an upper bound)",
    "aware-learned": "aware, speeds learnt as the prioritizer learns them (the default)",
}


def types(part: dict) -> str:
    rows = [
        "| type choice | average JCT | median | × best baseline |",
        "|---|---|---|---|",
    ]
    for name, r in part["rows"].items():
        if name.startswith("blind "):
            label = f"blind, nodes {r['node_order']} first (Slurm's first free GPUs)"
            if name == part["best_blind"]:
                label += ": the best order"
        else:
            label = _CHOICES.get(name, name)
        if name == part["best_baseline"]:
            label += ": the best baseline"
        rows.append(
            f"| {label} | {_h(r['avg_jct_s'])} | {_h(r['median_jct_s'])} "
            f"| {_n(r['vs_best_baseline'])} |"
        )
    return "\n".join(rows)


def typefair(part: dict) -> str:
    rows = [
        "| policy | average JCT | × LAS | worst account ρ (accounts) | per-job ρ p99 |",
        "|---|---|---|---|---|",
    ]
    for name, p in part["policies"].items():
        rows.append(
            f"| `{name}` | {_h(p['avg_jct_s'])} | {_n(p['avg_vs_las'])} "
            f"| {_n(p['worst_account_rho'], 2)} ({p['accounts']}) | {_n(p['job_rho_p99'], 1)} |"
        )
    return "\n".join(rows)


RENDER = {"fairness": fairness, "deadlines": deadlines, "types": types, "typefair": typefair}


def block(name: str) -> re.Pattern:
    """A part's block: its two markers and what lies between (nothing, in a new one)."""
    return re.compile(rf"<!-- as-deployed:{name} -->\n(?:.*?\n)?<!-- /as-deployed:{name} -->", re.S)


def rewrite(text: str, doc: dict) -> str:
    """``text`` with each part of ``doc`` rendered into its block (parts not in ``doc`` stay
    as they are); a block missing from ``text`` is an error."""
    for name in PARTS:
        if name not in doc:
            continue
        pat = block(name)
        if not pat.search(text):
            raise ValueError(f"no <!-- as-deployed:{name} --> block to rewrite")
        table = RENDER[name](doc[name])
        marked = f"<!-- as-deployed:{name} -->\n{table}\n<!-- /as-deployed:{name} -->"
        text = pat.sub(lambda m: marked, text)
    return text


def merge_record(doc: dict, record: Path = RECORD) -> dict:
    """The saved record with the parts ``doc`` measured replaced; saved back."""
    old = json.loads(record.read_text()) if record.exists() else {}
    new = {**old, **doc}
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(new, indent=1) + "\n")
    return new


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="src", type=Path, default=RECORD, help="the measured JSON")
    ap.add_argument("--write", type=Path, required=True, help="the markdown file to rewrite")
    a = ap.parse_args()
    doc = json.loads(a.src.read_text())
    a.write.write_text(rewrite(a.write.read_text(), doc))
    print(f"rewrote the as-deployed tables of {a.write} from {a.src}")


if __name__ == "__main__":
    main()
