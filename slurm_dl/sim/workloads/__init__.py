"""What a replay is fed: trace readers, a centre's own history, per-job GPU utilisation and
synthetic traces made from real ones."""
