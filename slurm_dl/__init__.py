"""slurm-dl: deep-learning GPU job scheduling on an existing Slurm cluster."""

__version__ = "0.2.0"
"""The release: raised with each one, and named by the newest heading of CHANGELOG.md."""
