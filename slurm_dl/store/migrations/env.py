"""Alembic environment: slurm-dl always passes an open connection (``config.attributes``)."""

from __future__ import annotations

from alembic import context

from slurm_dl.store.models import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection, target_metadata=metadata, render_as_batch=True, compare_type=True
)
with context.begin_transaction():
    context.run_migrations()
