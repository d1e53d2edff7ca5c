"""``simulate --report DIR``: one self-contained HTML file (inline CSS and SVG, no script, nothing
fetched), so it opens from a file:// URL on a machine without network.

:func:`figures` turns finished runs into plain numbers (pure); :func:`render` puts them through
the Jinja2 template ``report.html.j2`` next to this module; :func:`write_report` writes
``DIR/index.html``. A run is one policy under one site config (``config`` is ``None`` without
``--config``). Anything the simulation did not compute is listed, never shown as a number.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Sequence

from . import svgchart
from .metrics import jct, queue_series
from .units import DAYS, HOURS, TimeUnits, Unit, units_for

GPU_BUCKETS = (
    (1, 1, "1"),
    (2, 2, "2"),
    (3, 4, "3-4"),
    (5, 8, "5-8"),
    (9, 16, "9-16"),
    (17, 32, "17-32"),
    (33, 10**9, "33+"),
)
MAX_ACCOUNTS = 25


@dataclass
class ReportRun:
    policy: str
    config: str | None
    summary: dict
    results: list  # engine ClusterResults
    planned: int = -1  # its place among the planned runs (simulate)

    @property
    def name(self) -> str:
        return self.policy if self.config is None else f"{self.policy} @ {self.config}"


def jct_cdf(results, points: int = 200, unit: Unit = HOURS) -> tuple[list[float], list[float]]:
    """(JCT in ``unit``, fraction of jobs finished within it), about ``points`` points."""
    xs = sorted(jct(sj) for r in results for sj in r.jobs)
    n = len(xs)
    if not n:
        return [], []
    step = max(1, n // points)
    idx = list(range(step - 1, n, step))
    if idx[-1] != n - 1:
        idx.append(n - 1)
    return [unit.of(xs[i]) for i in idx], [(i + 1) / n for i in idx]


def utilisation_series(
    results, t0: float, t1: float, bins: int = 200, unit: Unit = DAYS
) -> tuple[list[float], list[float]]:
    """(time since ``t0`` in ``unit``, busy GPUs / total GPUs averaged over each bin). A job counts its GPUs
    from its first start to its end; a preempted job (its run segments are not recorded) counts
    its executed GPU time spread evenly over that span, so the curve is approximate there (and
    clipped at 1)."""
    total = sum(r.cluster.total_gpus for r in results)
    if not total or t1 <= t0:
        return [], []
    events: list[tuple[float, float]] = []
    for r in results:
        for sj in r.jobs:
            a, b = sj.first_start, sj.end_time
            if a is None or b is None or b <= a:
                continue
            rate = sj.gpus if not sj.preemptions else sj.gpus * min(1.0, sj.executed0 / (b - a))
            events.append((a, rate))
            events.append((b, -rate))
    events.sort()
    width = (t1 - t0) / bins
    edges = [t0 + i * width for i in range(bins + 1)]
    area = [0.0] * bins
    level, last = 0.0, t0
    for t, d in events + [(t1, 0.0)]:
        t = min(max(t, t0), t1)
        if t > last and level:
            i = min(bins - 1, int((last - t0) / width))
            while last < t:
                seg_end = min(t, edges[i + 1]) if i < bins - 1 else t
                area[i] += level * (seg_end - last)
                last = seg_end
                i += 1
        last = max(last, t)
        level += d
    return [unit.of(edges[i] + width / 2 - t0) for i in range(bins)], [
        min(1.0, a / (width * total)) for a in area
    ]


def wait_by_gpus(results, unit: Unit = HOURS) -> dict[str, tuple[int, float]]:
    """GPU-count bucket label -> (jobs, mean queueing delay in ``unit``), buckets with jobs
    only."""
    sums: dict[str, list[float]] = {}
    highs = [hi for _, hi, _ in GPU_BUCKETS]
    for r in results:
        for sj in r.jobs:
            label = GPU_BUCKETS[bisect.bisect_left(highs, sj.gpus)][2]
            acc = sums.setdefault(label, [0, 0.0])
            acc[0] += 1
            acc[1] += sj.queue_s
    return {
        b: (int(sums[b][0]), unit.of(sums[b][1] / sums[b][0]))
        for _, _, b in GPU_BUCKETS
        if b in sums
    }


def _downsample(xs: list, ys: list, points: int) -> tuple[list, list]:
    step = max(1, len(xs) // points)
    if step == 1:
        return xs, ys
    keep = list(range(0, len(xs), step))
    if keep[-1] != len(xs) - 1:
        keep.append(len(xs) - 1)
    return [xs[i] for i in keep], [ys[i] for i in keep]


def _span(runs: Sequence[ReportRun]) -> tuple[float, float]:
    """From the first submission to the last end over ``runs``' jobs."""
    subs = [sj.submit for r in runs for c in r.results for sj in c.jobs]
    ends = [sj.end_time or sj.submit for r in runs for c in r.results for sj in c.jobs]
    return (min(subs), max(ends)) if subs else (0.0, 0.0)


def report_units(runs: Sequence[ReportRun], meta: dict) -> TimeUnits:
    """The units the what-if chose for its history (``meta["units"]``), else those that fit
    the runs' own span."""
    if meta.get("units") is not None:
        return meta["units"]
    t0, t1 = _span(runs)
    return units_for(t1 - t0)


def figures(runs: Sequence[ReportRun], units: TimeUnits | None = None) -> dict:
    """The report's numbers and charts (SVG markup strings) for ``runs``, times in ``units``
    (default: those that fit the runs' span)."""
    names = [r.name for r in runs]
    t0, t1 = _span(runs)
    units = units or units_for(t1 - t0)
    tu, su = units.time, units.span
    cdfs, queues, utils = [], [], []
    for r in runs:
        cdfs.append((r.name, *jct_cdf(r.results, unit=tu)))
        ts, qs = queue_series(r.results, points=800)
        qx, qy = _downsample([su.of(t - t0) for t in ts], qs, 400)
        queues.append((r.name, qx, qy))
        utils.append((r.name, *utilisation_series(r.results, t0, t1, unit=su)))
    waits = [wait_by_gpus(r.results, unit=tu) for r in runs]
    buckets = [b for _, _, b in GPU_BUCKETS if any(b in w for w in waits)]
    accounts = _accounts(runs)
    return {
        "names": names,
        "jct_cdf": svgchart.line_chart(
            "JCT CDF",
            cdfs,
            f"job completion time ({tu.word}, log scale)",
            "fraction of jobs",
            log_x=True,
            y_max=1.0,
            y_percent=True,
        ),
        "queue": svgchart.line_chart(
            "Pending jobs over time",
            queues,
            f"{su.word} since the first submission",
            "pending jobs",
            step=True,
        ),
        "utilisation": svgchart.line_chart(
            "GPU utilisation over time",
            utils,
            f"{su.word} since the first submission",
            "busy GPUs / all GPUs",
            y_max=1.0,
            y_percent=True,
        ),
        "wait_by_gpus": svgchart.bar_chart(
            "Mean queueing delay by GPU count",
            [f"{b} GPU" for b in buckets],
            [(r.name, [w[b][1] if b in w else None for b in buckets]) for r, w in zip(runs, waits)],
            f"mean wait ({tu.word})",
        ),
        "wait_rows": [(b, [w.get(b) for w in waits]) for b in buckets],
        "accounts": accounts,
        "accounts_left_out": max(
            0, len({a for r in runs for a in r.summary.get("per_account", {})}) - len(accounts)
        ),
        "account_rows": [
            (a, [r.summary.get("per_account", {}).get(a) for r in runs]) for a in accounts
        ],
        "type_rows": type_rows(runs),
        "max_rho_chart": svgchart.bar_chart(
            "Worst finish-time fairness (max ρ)",
            ["max ρ"],
            [(r.name, [r.summary.get("max_rho")]) for r in runs],
            "max ρ",
        ),
    }


def type_rows(runs: Sequence[ReportRun]) -> list[tuple[str, int, list]]:
    """Per GPU type (clusters of several types): (type, GPUs, each run's utilisation)."""
    types: dict[str, int] = {}
    for r in runs:
        for t, row in r.summary.get("per_type", {}).items():
            types.setdefault(t, row["gpus"])
    return [
        (t, n, [r.summary.get("per_type", {}).get(t, {}).get("utilization") for r in runs])
        for t, n in types.items()
    ]


def _accounts(runs: Sequence[ReportRun]) -> list[str]:
    jobs: dict[str, int] = {}
    for r in runs:
        for a, row in r.summary.get("per_account", {}).items():
            jobs[a] = max(jobs.get(a, 0), row.get("jobs", 0))
    return sorted(jobs, key=lambda a: (-jobs[a], a))[:MAX_ACCOUNTS]


@lru_cache(maxsize=1)
def _template():
    import jinja2

    text = resources.files(__package__).joinpath("report.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    env.filters["num"] = lambda v, spec=".2f": "–" if v is None else format(v, spec)
    env.filters["dur"] = lambda v, unit, spec=".2f": "–" if v is None else format(unit.of(v), spec)
    return env.from_string(text)


def _pct(new: float | None, old: float | None) -> float | None:
    return None if new is None or old is None or old == 0 else (new - old) / old


def changes(runs: Sequence[ReportRun]) -> list[dict]:
    """With several configs: each policy's run under every config but the first (the current
    one) against its run under the first: the relative change of mean JCT, mean wait and worst
    ρ (negative is better)."""
    configs = list(dict.fromkeys(r.config for r in runs))
    if len(configs) < 2:
        return []
    base = {r.policy: r.summary for r in runs if r.config == configs[0]}
    out = []
    for r in runs:
        b = base.get(r.policy)
        if r.config == configs[0] or b is None:
            continue
        s = r.summary
        out.append(
            {
                "policy": r.policy,
                "config": r.config,
                "against": configs[0],
                "jct": _pct(s["avg_jct_s"], b["avg_jct_s"]),
                "wait": _pct(s["avg_queue_s"], b["avg_queue_s"]),
                "rho": _pct(s.get("max_rho"), b.get("max_rho")),
            }
        )
    return out


def best(runs: Sequence[ReportRun], units: TimeUnits | None = None) -> list[tuple[str, str]]:
    """The rows an admin looks for, each with why: the lowest mean JCT (the prioritizer's
    objective), and the lowest worst ρ where fairness was computed when that is another row."""
    tu = (units or report_units(runs, {})).time
    if not runs:
        return []
    fast = min(runs, key=lambda r: (r.summary["avg_jct_s"], r.name))
    rho = fast.summary.get("max_rho")
    out = [
        (
            fast.name,
            f"lowest mean JCT, {tu.of(fast.summary['avg_jct_s']):.2f} {tu.label}"
            + (f"; its worst ρ is {rho:.2f}" if rho is not None else ""),
        )
    ]
    fair = [r for r in runs if r.summary.get("max_rho") is not None]
    if fair:
        f = min(fair, key=lambda r: (r.summary["max_rho"], r.summary["avg_jct_s"], r.name))
        if f is not fast:
            out.append(
                (
                    f.name,
                    f"fairest: worst ρ {f.summary['max_rho']:.2f}, mean JCT "
                    f"{tu.of(f.summary['avg_jct_s']):.2f} {tu.label}",
                )
            )
    return out


def render(runs: Sequence[ReportRun], meta: dict) -> str:
    """The HTML text. ``meta``: ``title``, ``trace`` (dict of what was read), ``configs`` (list
    of dicts: label, path, cluster, cost), ``not_computed`` (list of sentences),
    ``interrupted`` and ``not_run`` (run names), ``recorded`` (a history's own figures, or
    None), ``units`` (the :class:`TimeUnits` of the what-if; else those of the runs' span)."""
    from markupsafe import Markup

    units = report_units(runs, meta)
    figs = figures(runs, units)
    for k in ("jct_cdf", "queue", "utilisation", "wait_by_gpus", "max_rho_chart"):
        figs[k] = Markup(figs[k])
    deadline = [r for r in runs if "deadline_hit_rate" in r.summary]
    idle = [r for r in runs if r.summary.get("idle")]
    return _template().render(
        runs=runs,
        figs=figs,
        meta=meta,
        deadline=deadline,
        idle=idle,
        several_configs=len({r.config for r in runs}) > 1,
        changes=changes(runs),
        best=best(runs, units),
        units=units,
        recorded=meta.get("recorded"),
        errors=any(r.summary.get("start_error_s") for r in runs),
    )


def write_report(out_dir: Path, runs: Sequence[ReportRun], meta: dict) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "index.html"
    path.write_text(render(runs, meta), encoding="utf-8")
    return path
