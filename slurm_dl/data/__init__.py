"""Small data derived from public traces (summaries, never copies)."""
