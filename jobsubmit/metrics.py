"""The filter service's Prometheus metrics.

Series (all prefixed ``slurm_dl_filter_``):

- ``decisions_total{outcome,class}``: accept / reject / error / busy, by the job's class;
- ``rejections_total{rule}``: which rule refused the job;
- ``decision_seconds`` (histogram): time to decide one job, in the service;
- ``shim_failures_total{failure_mode}``: submissions the Lua shim could not get an answer for
  (service down, slow, garbled) and so let in unchanged (``accept``: failing open) or refused
  (``reject``). The shim counts them inside slurmctld and reports the count with its next
  request, so they show up once the service answers again;
- ``config_reloads_total{outcome}``; ``start_timestamp_seconds``.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "slurm_dl_filter_"
_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2)
MAX_REPORTED_FAILURES = 1_000_000  # a shim's report above this is garbage, not failures


class FilterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r, p = self.registry, PREFIX
        self.decisions = Counter(
            p + "decisions",
            "Filter answers by outcome and job class",
            ["outcome", "class"],
            registry=r,
        )
        self.rejections = Counter(p + "rejections", "Rejected jobs by rule", ["rule"], registry=r)
        self.latency = Histogram(
            p + "decision_seconds",
            "Seconds to decide one job",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.shim_failures = Counter(
            p + "shim_failures",
            "Submissions the shim could not get an answer for, "
            "by its failure mode (accept: let in unchanged)",
            ["failure_mode"],
            registry=r,
        )
        self.reloads = Counter(
            p + "config_reloads", "SIGHUP config reloads by outcome", ["outcome"], registry=r
        )
        self.started = Gauge(
            p + "start_timestamp_seconds", "Unix time the service started", registry=r
        )
        self.started.set(time.time())
        for mode in ("accept", "reject"):
            self.shim_failures.labels(mode)
        for outcome in ("error", "busy"):
            self.decisions.labels(outcome, "-")

    def decided(self, decision: Any, seconds: float) -> None:
        cls = decision.job_class.value if getattr(decision, "job_class", None) else "-"
        if decision.accepted:
            self.decisions.labels("accept", cls).inc()
        else:
            self.decisions.labels("reject", cls).inc()
            self.rejections.labels(decision.rule or "-").inc()
        self.latency.observe(seconds)

    def failed(self, outcome: str) -> None:
        """An ``error`` or ``busy`` answer (the shim then follows its failure mode)."""
        self.decisions.labels(outcome, "-").inc()

    def shim_report(self, message: Mapping[str, Any]) -> None:
        """The shim's count of failures since its last answered request, if the request carries one."""
        n = message.get("shim_failures")
        if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_REPORTED_FAILURES:
            mode = message.get("failure_mode")
            self.shim_failures.labels(mode if mode in ("accept", "reject") else "accept").inc(n)
