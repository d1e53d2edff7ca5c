"""Baseline: the tables slurm-dl created before its store had schema versions.

A database made by that release has exactly these tables and no ``alembic_version``;
``slurm-dl db upgrade`` stamps it with this revision and goes on from here. The table
definitions are frozen copies (later model changes never edit this file).

Revision ID: 0001
Revises:
"""

from alembic import op
import sqlalchemy as sa

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def tables(meta: sa.MetaData) -> list[sa.Table]:
    """The baseline schema, also used by tests to build a database 'made by the previous release'."""
    return [
        sa.Table(
            "sdl_ledger",
            meta,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("data", sa.String, nullable=False),
            sa.Column("saved_at", sa.Float, nullable=False),
            sa.Column("cycle", sa.Integer, nullable=False),
        ),
        sa.Table(
            "sdl_site_factor",
            meta,
            sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("value", sa.Integer, nullable=False),
            sa.Column("pushed_at", sa.Float, nullable=False),
        ),
        sa.Table(
            "sdl_preemption",
            meta,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("victim_job_id", sa.Integer, nullable=False, index=True),
            sa.Column("need_job_id", sa.Integer, nullable=False, index=True),
            sa.Column("state", sa.String, nullable=False),
            sa.Column("signalled_at", sa.Float, nullable=False),
            sa.Column("restarts_at_signal", sa.Integer, nullable=False),
            sa.Column("updated_at", sa.Float, nullable=False),
            sa.Column("reason", sa.String, nullable=False),
        ),
        sa.Table(
            "sdl_decision",
            meta,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("at", sa.Float, nullable=False),
            sa.Column("job_id", sa.Integer, nullable=False, index=True),
            sa.Column("kind", sa.String, nullable=False),
            sa.Column("value", sa.Integer, nullable=True),
            sa.Column("reason", sa.String, nullable=False),
        ),
        sa.Table(
            "sdl_explanations",
            meta,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("at", sa.Float, nullable=False),
            sa.Column("data", sa.String, nullable=False),
        ),
        sa.Table(
            "sdl_job_utilisation",
            meta,
            sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("samples", sa.Integer, nullable=False),
            sa.Column("util_sum", sa.Float, nullable=False),
            sa.Column("peak_util_percent", sa.Float, nullable=False),
            sa.Column("peak_gpu_mem_bytes", sa.Integer, nullable=False),
            sa.Column("first_sample_at", sa.Float, nullable=True),
            sa.Column("last_sample_at", sa.Float, nullable=True),
            sa.Column("last_busy_at", sa.Float, nullable=True),
            sa.Column("idle_since", sa.Float, nullable=True),
            sa.Column("verdict", sa.String, nullable=False),
            sa.Column("warned_at", sa.Float, nullable=True),
            sa.Column("action", sa.String, nullable=True),
            sa.Column("action_at", sa.Float, nullable=True),
            sa.Column("updated_at", sa.Float, nullable=False, index=True),
            sa.Column("gpu_seen", sa.String, nullable=False),
        ),
    ]


def upgrade() -> None:
    meta = sa.MetaData()
    tables(meta)
    meta.create_all(op.get_bind())


def downgrade() -> None:
    meta = sa.MetaData()
    tables(meta)
    meta.drop_all(op.get_bind())
