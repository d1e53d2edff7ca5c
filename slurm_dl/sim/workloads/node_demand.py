"""Read a recorded node-demand series: a CSV of ``time,active,total`` (nodes in use out of the
nodes there are), one row per minute or per step, as ``slurm-dl power replay`` replays it."""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

from ...core.errors import TraceError
from ...core.power.replay import DemandPoint

COLUMNS = ("time", "active", "total")


def read_node_demand(path: Path) -> list[DemandPoint]:
    """The rows in time order. A missing column, a bad time or count, ``active`` above
    ``total`` or a row out of order fails with the file, the line and what was wrong."""
    try:
        f = path.open(newline="", encoding="utf-8")
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    out: list[DemandPoint] = []
    with f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: missing columns {missing}; need {', '.join(COLUMNS)}")
        for row in reader:
            line = reader.line_num
            try:
                t = datetime.fromisoformat(row["time"].strip())
                active, total = int(row["active"]), int(row["total"])
            except (ValueError, AttributeError):
                raise TraceError(
                    f"{path}:{line}: got {row['time']!r},{row['active']!r},{row['total']!r}; "
                    "need a time (YYYY-MM-DD HH:MM:SS) and two whole numbers"
                ) from None
            if not 0 <= active <= total:
                raise TraceError(
                    f"{path}:{line}: active {active} of total {total}; need 0 <= active <= total"
                )
            if out and t <= out[-1].time:
                raise TraceError(f"{path}:{line}: {t} is not after {out[-1].time}; sort by time")
            out.append(DemandPoint(t, active, total))
    if not out:
        raise TraceError(f"{path}: no rows")
    return out
