"""The HTML report of ``slurm-dl tune``: each candidate's objective on the part of the history
it was tuned on and on the part it never saw, the current settings beside them, how much each
setting matters, and the proposal's effect per account. One self-contained file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from .svgchart import bar_chart


def _charts(doc: dict) -> dict:
    unit = doc["objective"]
    rows = [doc["current"]] + doc["candidates"]
    names = ["current"] + [f"#{i + 1}" for i in range(len(doc["candidates"]))]
    out = {
        "objective": bar_chart(
            f"{unit}: tuned on and judged on",
            names,
            [
                ("tuned on (earlier part)", [r["in_sample"] for r in rows]),
                ("judged on (later part)", [r["out_of_sample"] for r in rows]),
            ],
            unit,
        )
    }
    out["sensitivity"] = {
        key: bar_chart(
            f"{key}: {unit}, mean over the other settings",
            [str(v) for v, _ in vals],
            [("tuned on", [m for _, m in vals])],
            unit,
        )
        for key, vals in doc["sensitivity"].items()
    }
    accts = doc.get("per_account_out") or []
    if accts:
        shown = sorted(accts, key=lambda a: -(a["jobs"] or 0))[:20]
        out["accounts"] = bar_chart(
            "average JCT per account, later part (20 largest)",
            [a["account"] for a in shown],
            [
                ("current", [a["current_avg_jct_s"] for a in shown]),
                ("proposed", [a["proposed_avg_jct_s"] for a in shown]),
            ],
            "seconds",
        )
    return out


def write_report(out_dir: Path, doc: dict) -> Path:
    import jinja2
    from markupsafe import Markup

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = resources.files(__package__).joinpath("tune_report.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    env.filters["num"] = lambda v: (
        "–" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}")
    )
    charts = _charts(doc)
    safe = {
        "objective": Markup(charts["objective"]),
        "sensitivity": {k: Markup(v) for k, v in charts["sensitivity"].items()},
        "accounts": Markup(charts["accounts"]) if "accounts" in charts else None,
    }
    path = out_dir / "index.html"
    path.write_text(env.from_string(text).render(doc=doc, charts=safe), encoding="utf-8")
    return path
