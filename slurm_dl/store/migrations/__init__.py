"""Alembic migrations of the prioritizer's store (run by ``slurm-dl db upgrade``)."""
