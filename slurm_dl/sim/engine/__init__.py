"""The event-driven replay of one cluster: the per-job state, placement, the disciplines' passes,
node groups of several GPU types, lease bookkeeping and the dispatch overheads."""
