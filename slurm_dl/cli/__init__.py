"""Command-line interfaces: ``slurm-dl`` for admins, ``dlsubmit`` for users."""
