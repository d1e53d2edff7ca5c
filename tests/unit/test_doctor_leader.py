"""Doctor on the leader lease, read from a real SQLite store: who leads, at which epoch and
since when; whether this host's prioritizer leads or stands by; no leader once the lease ran
out."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from slurm_dl.cli.doctor_cmd import _database, _gauge
from slurm_dl.core.doctor import Facts, diagnose
from slurm_dl.store import Store
from slurm_dl.store.lease import Lease


def leader(url: str, now: float, gauge: float | None = None, host: str | None = None):
    f = Facts(config_path="site.toml", database_url=url, now=now, interval_s=5.0)
    _database(f, url)
    f.leader_gauge = gauge
    if host is not None:
        f.hostname = host
    return next(x for x in diagnose(f) if x.check == "prioritizer leader")


def test_doctor_says_who_leads_since_when_and_what_this_host_does(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/ledger.db"
    store = Store(url)
    now = time.time()
    assert leader(url, now).status == "fail"  # no prioritizer has led yet
    clock = [now]
    lease = Lease(store, 15.0, clock=lambda: clock[0], mono=lambda: clock[0])
    assert lease.try_take()
    me = f"{socket.gethostname()} pid {lease.pid}"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))

    here = leader(url, now + 3, gauge=1)
    assert here.status == "ok", here
    assert here.detail.startswith(f"this host's prioritizer: {me} leads at epoch 1 since {since}")
    assert "renewed 3 s ago" in here.detail

    elsewhere = leader(url, now + 3, gauge=0, host="other-host")
    assert elsewhere.status == "ok"
    assert elsewhere.detail.startswith(f"this host's prioritizer stands by; {me} leads at epoch 1")
    unscraped = leader(url, now + 3, gauge=None, host="other-host")
    assert unscraped.detail.endswith("this host's prioritizer is not the leader")
    two = leader(url, now + 3, gauge=1, host="other-host")  # it says it leads; the lease: not
    assert two.status == "fail" and "says it leads, but the lease says" in two.detail

    gone = leader(url, now + 20)  # not renewed for longer than the lease
    assert gone.status == "fail", gone
    assert gone.detail == f"no leader: the lease of {me} (epoch 1) ran out 5 s ago"
    assert "systemctl start slurm-dl-prioritizer" in gone.fix
    store.close()


def test_the_leader_gauge_is_read_from_the_metrics_page() -> None:
    page = (
        "# HELP slurm_dl_prioritizer_leader 1 while ...\n"
        "# TYPE slurm_dl_prioritizer_leader gauge\n"
        "slurm_dl_prioritizer_leader 0.0\n"
        "slurm_dl_prioritizer_leader_epoch 0.0\n"
    )
    assert _gauge(page, "slurm_dl_prioritizer_leader") == 0.0
    assert _gauge("no metrics here {", "slurm_dl_prioritizer_leader") is None
    assert _gauge("", "slurm_dl_prioritizer_leader") is None
