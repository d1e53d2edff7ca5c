"""The plumbing both services (the filter and the prioritizer) share: HTTP endpoints that bound
their own connections (:mod:`.bounded_http`) and serve Prometheus metrics
(:mod:`.metrics_http`), memory snapshots on a signal (:mod:`.process_memory`) and systemd's
readiness protocol (:mod:`.sd_notify`)."""
