"""What every daemon's command shares: ``--log-level``, ``--log-format`` and ``--metrics-port``.

``--log-format text`` (the default) writes ``TIME LEVEL message``; ``json`` writes one JSON
object per line (``ts``, ``level``, ``logger``, ``daemon``, ``msg``, and ``exc`` when there is a
traceback) for journald/Loki/Elasticsearch pipelines. ``raise_open_files_limit`` lifts the soft
limit on open files toward the hard one at start.
"""

from __future__ import annotations

import json
import logging
import resource
import sys
from datetime import datetime, timezone
from typing import Optional

import typer

LEVELS = ("debug", "info", "warning", "error")
OPEN_FILES = (
    8192  # the soft open-files limit a daemon raises itself to, where the hard limit allows
)
FORMATS = ("text", "json")

LogLevelOpt = typer.Option(
    "info", "--log-level", help="debug, info, warning or error", case_sensitive=False
)
LogFormatOpt = typer.Option(
    "text", "--log-format", help="text, or json (one object per line)", case_sensitive=False
)
MetricsPortOpt = typer.Option(
    None,
    "--metrics-port",
    min=0,
    max=65535,
    help="serve Prometheus metrics on this port (0: any free port; "
    "default: metrics_port in the site config, else none)",
)


class JsonFormatter(logging.Formatter):
    def __init__(self, daemon: str) -> None:
        super().__init__()
        self.daemon = daemon

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "daemon": self.daemon,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def setup_logging(daemon: str, level: str = "info", fmt: str = "text") -> None:
    """Configure the root logger for a daemon (stderr; journald adds its own timestamps)."""
    level, fmt = level.lower(), fmt.lower()
    if level not in LEVELS:
        raise typer.BadParameter(
            f"{level!r}; allowed: {', '.join(LEVELS)}", param_hint="--log-level"
        )
    if fmt not in FORMATS:
        raise typer.BadParameter(
            f"{fmt!r}; allowed: {', '.join(FORMATS)}", param_hint="--log-format"
        )
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(daemon))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {daemon} %(levelname)s %(message)s"))
    handler._slurm_dl = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for h in list(root.handlers):  # ours from an earlier call (tests call several commands)
        if getattr(h, "_slurm_dl", False):
            root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    if level != "debug":
        logging.getLogger("apscheduler").setLevel(logging.WARNING)


def metrics_port(flag: Optional[int], configured: Optional[int]) -> Optional[int]:
    """--metrics-port, else the site config's metrics_port; None: no endpoint."""
    return flag if flag is not None else configured


def raise_open_files_limit(target: int = OPEN_FILES) -> int:
    """Raise the soft RLIMIT_NOFILE toward the hard limit (systemd starts services at 1,024 soft),
    up to ``target``, and return the soft limit now in force. Defence in depth only: the HTTP
    endpoints bound their own connections (slurm_dl.daemon.bounded_http), so the daemons do not rely on
    this. Not all the way to a huge hard limit: the Slurm commands the daemons run inherit it, and
    programs that close every descriptor up to the limit slow down with it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        target = min(target, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft
