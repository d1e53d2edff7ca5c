"""What a what-if leaves: the JSON document of its runs, the facts its HTML report shows, the
report itself and the idle policy's per-job verdicts (CSV)."""

from __future__ import annotations

from pathlib import Path

from ...core.errors import SlurmDLError


def document(
    variants, runs, several, *, imported, overhead, slurm_backfill, interrupted, not_run
) -> dict:
    """The JSON document of the runs."""
    if several:
        doc = {
            "configs": {
                v.label: {
                    "path": str(v.path),
                    "overrides": v.overrides,
                    "cluster": v.cluster,
                    "preemption_cost": v.cost.describe(),
                    "policies": {r.policy: r.summary for r in runs if r.config == v.label},
                }
                for v in variants
            }
        }
    else:
        v = variants[0]
        doc = {
            "config": {"path": str(v.path) if v.path else None, "overrides": v.overrides},
            "policies": {r.policy: r.summary for r in runs},
        }
    if imported is not None:
        doc["import"] = imported
    if overhead is not None:
        doc["dispatch"] = overhead["doc"]
    if slurm_backfill:
        doc["placement"] = "slurm-backfill"
    if interrupted:
        doc["interrupted"] = True
        doc["policies_not_run"] = not_run
    return doc


def report_meta(
    trace, fmt, jobs, imported, variants, runs, no_fairness, interrupted, not_run
) -> dict:
    """What the HTML report says beside the runs: the trace, the configs, what was not computed."""
    from datetime import datetime, timezone

    def when(t: float) -> str:
        return (
            datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            if t > 1e8
            else f"{t:g} s"
        )

    subs = [j.submit_time for j in jobs]
    facts = [
        ("trace", trace.name),
        ("format", fmt),
        ("jobs replayed", str(len(jobs))),
        ("first / last submission", f"{when(min(subs))} / {when(max(subs))}"),
        ("GPUs per job", f"{min(j.num_gpus for j in jobs)} to {max(j.num_gpus for j in jobs)}"),
        ("accounts", str(len({j.account for j in jobs}))),
    ]
    if imported is not None:
        facts.append(("import", imported["describe"]))
    missing = []
    if no_fairness:
        missing.append("Finish-time fairness (ρ, Jain): not computed (--no-fairness).")
    elif any(v.setup.cluster_sizes is not None for v in variants):
        missing.append(
            "Finish-time fairness: each group runs on its own cluster, so ρ is 1 by definition."
        )
    if not any("deadline_hit_rate" in r.summary for r in runs):
        missing.append("Deadline outcomes: no job in the trace has a strict deadline.")
    if not any(r.summary.get("idle") for r in runs):
        missing.append("Idle-GPU policy: not replayed (--idle-policy with GPU utilisation).")
    if interrupted:
        missing.append(f"Interrupted: not run: {', '.join(not_run)}.")
    return {
        "title": f"What-if: {trace.name}",
        "trace": facts,
        "not_computed": missing,
        "interrupted": interrupted,
        "not_run": not_run,
        "configs": [
            {
                "label": v.label or "the defaults (no --config)",
                "overrides": ", ".join(v.overrides),
                "cluster": v.cluster,
                "cost": v.cost.describe(),
            }
            for v in variants
        ],
    }


def write_report(report: Path, runs, meta: dict, say) -> None:
    """``--report DIR``: DIR/index.html, said in a line."""
    from ..reports.report import write_report as write

    try:
        written = write(report, runs, meta)
    except OSError as e:
        raise SlurmDLError(f"--report: cannot write {report}: {e.strerror or e}") from None
    say(f"wrote {written}")


def write_idle_report(path: Path, jobs, outcomes) -> None:
    """``--idle-report FILE``: the idle policy's verdict on each job, as CSV."""
    import csv

    from ..idle_replay import OUTCOME_COLUMNS, outcome_rows

    try:
        with Path(path).open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(OUTCOME_COLUMNS)
            w.writerows(outcome_rows(jobs, outcomes))
    except OSError as e:
        raise SlurmDLError(f"--idle-report: cannot write {path}: {e.strerror or e}") from None
