"""slurm-dl: deep-learning GPU job scheduling on an existing Slurm cluster."""

__version__ = "0.1.0"
