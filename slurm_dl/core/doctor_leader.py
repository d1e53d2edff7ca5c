"""``slurm-dl doctor``'s verdict on the prioritizer's leader lease (pure): who leads on the
database, at which epoch and since when, and whether this host's prioritizer is that leader
or stands by (its ``slurm_dl_prioritizer_leader`` gauge, where doctor could scrape it)."""

from __future__ import annotations

import time
from typing import Any, Callable

from .finding import Finding

CHECK = "prioritizer leader"
START = "systemctl start slurm-dl-prioritizer (on the host that should lead)"


def _at(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def leader_findings(f: Any, add: Callable[[Finding], None]) -> None:
    """``f.leader``: the lease row as a dict (host, pid, epoch, taken_at, renewed_at,
    expires_at), None when no prioritizer has led; ``f.leader_read``: whether doctor read it
    (not where the database failed); ``f.leader_gauge``: this host's prioritizer's leader
    gauge (None: not scraped); ``f.hostname``: this host."""
    if not f.leader_read:
        return
    lease = f.leader
    if lease is None:
        add(Finding(CHECK, "fail", "no prioritizer has held the leader lease yet", START))
        return
    who = f"{lease['host']} pid {lease['pid']}"
    if f.now >= lease["expires_at"]:
        add(
            Finding(
                CHECK,
                "fail",
                f"no leader: the lease of {who} (epoch {lease['epoch']}) ran out "
                f"{f.now - lease['expires_at']:.0f} s ago",
                START + "; the old leader's log says why it stopped",
            )
        )
        return
    leads = (
        f"{who} leads at epoch {lease['epoch']} since {_at(lease['taken_at'])} "
        f"(renewed {max(0.0, f.now - lease['renewed_at']):.0f} s ago)"
    )
    here = lease["host"] == f.hostname
    if f.leader_gauge == 1 and not here:
        add(
            Finding(
                CHECK,
                "fail",
                f"this host's prioritizer says it leads, but the lease says {leads}",
                "stop one of them: systemctl restart slurm-dl-prioritizer on this host",
            )
        )
    elif here:
        add(Finding(CHECK, "ok", f"this host's prioritizer: {leads}"))
    elif f.leader_gauge == 0:
        add(Finding(CHECK, "ok", f"this host's prioritizer stands by; {leads}"))
    else:
        add(Finding(CHECK, "ok", f"{leads}; this host's prioritizer is not the leader"))
