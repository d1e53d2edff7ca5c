"""A synthetic Chronus-format trace with stepped soft deadlines, built from a Chronus trace's jobs.

Chronus' public traces (MIX1, SLO) hold only strict and best-effort jobs; its soft-deadline trace
(MIX2) is not among the shared ones. :func:`soft_deadline_rows` keeps each job of the source
trace (user, GPUs, submission, model, duration) and draws its class again, seeded: about 60 %
soft, 30 % strict, 10 % best effort. A deadline job's first step ``d`` is its own
``expect_time`` where the source gave it one, else its duration times a ratio drawn from the
source's strict jobs (deadline / duration: 1.1 … 4.2, median 2.0). Step scheme (Chronus' shape:
the value falls in steps as the deadline passes): strict ``d`` worth 10; soft ``d``, ``1.5 d``,
``2.5 d`` worth 10, 5 and 2 (times after submission, in minutes, as in Chronus).
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

FIELDS = (
    "job_id",
    "user",
    "num_gpu",
    "submit_time",
    "iterations",
    "model_name",
    "duration",
    "interval",
    "expect_time_list",
    "expect_value_list",
    "best_effort",
    "job_type",
)
SOFT_STEPS = ((1.0, 10), (1.5, 5), (2.5, 2))


def soft_deadline_rows(
    source: str | Path, *, seed: int = 0, soft: float = 0.6, strict: float = 0.3
) -> list[dict]:
    """The source trace's rows with classes and steps drawn again (see the module)."""
    with open(source, newline="") as f:
        rows = list(csv.DictReader(f))
    ratios = []
    for r in rows:
        if r.get("job_type") == "strict" and float(r.get("duration") or 0) > 0:
            ratios.append(float(r["expect_time_list"].split("-")[0]) / float(r["duration"]))
    if not ratios:
        raise ValueError(f"{source}: no strict jobs to draw deadline ratios from")
    rng = random.Random(seed)
    out = []
    for r in rows:
        u = rng.random()
        kind = "soft" if u < soft else "strict" if u < soft + strict else "best"
        ratio = rng.choice(ratios)
        dur = float(r.get("duration") or 0)
        if r.get("job_type") == "strict":
            d = float(r["expect_time_list"].split("-")[0])
        else:
            d = max(1.0, round(dur * ratio))
        row = dict(r)
        row["job_type"] = kind
        row["best_effort"] = "1" if kind == "best" else "0"
        if kind == "soft":
            row["expect_time_list"] = "-".join(str(round(d * k)) for k, _ in SOFT_STEPS)
            row["expect_value_list"] = "-".join(str(v) for _, v in SOFT_STEPS)
        elif kind == "strict":
            row["expect_time_list"], row["expect_value_list"] = str(round(d)), "10"
        else:
            row["expect_time_list"], row["expect_value_list"] = row.get("submit_time", "0"), "10"
        out.append({k: row.get(k, "") for k in FIELDS})
    return out


def write_soft_deadline_trace(source: str | Path, dest: str | Path, *, seed: int = 0) -> Path:
    """Write :func:`soft_deadline_rows` to ``dest`` as a Chronus CSV; returns ``dest``."""
    rows = soft_deadline_rows(source, seed=seed)
    dest = Path(dest)
    with open(dest, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    return dest
