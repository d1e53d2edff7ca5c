"""Resizes of elastic jobs as intent rows: each step (signal, requeuehold, size update,
release) is written before its Slurm call, so a daemon killed between them finishes the
resize on restart and never leaves a job held.

Revision ID: 0006
Revises: 0005
"""

from alembic import op
import sqlalchemy as sa

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sdl_resize",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.Integer, nullable=False, index=True),
        sa.Column("state", sa.String, nullable=False, index=True),
        sa.Column("from_gpus", sa.Integer, nullable=False),
        sa.Column("to_gpus", sa.Integer, nullable=False),
        sa.Column("to_nodes", sa.Integer, nullable=False),
        sa.Column("restarts_at_start", sa.Integer, nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("next_try_at", sa.Float, nullable=False),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("reason", sa.String, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sdl_resize")
