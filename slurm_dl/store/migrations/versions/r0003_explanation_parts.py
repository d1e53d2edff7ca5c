"""Explanations in two parts: per-job rows rewritten only when rebuilt, numbers per cycle.

A cycle used to rewrite every job's whole explanation as one document; at 100,000 jobs that
was most of the cycle. ``sdl_explanation_part`` holds the slow-changing part per job; the
existing ``sdl_explanations`` row keeps the per-cycle numbers. Old-format rows still read.

Revision ID: 0003
Revises: 0002
"""

from alembic import op
import sqlalchemy as sa

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sdl_explanation_part",
        sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("data", sa.String, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sdl_explanation_part")
