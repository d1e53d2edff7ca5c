"""Each job's GPU energy per GPU and agent sum (``sdl_job_energy``), kept across restarts so
joules per job, user and account are counted once.

Revision ID: 0008
Revises: 0006
"""

from alembic import op
import sqlalchemy as sa

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sdl_job_energy",
        sa.Column("job_id", sa.Integer, primary_key=True),
        sa.Column("node", sa.String, primary_key=True),
        sa.Column("gpu", sa.Integer, primary_key=True),
        sa.Column("since", sa.Float, primary_key=True),
        sa.Column("user", sa.String, nullable=False),
        sa.Column("account", sa.String, nullable=False),
        sa.Column("joules", sa.Float, nullable=False),
        sa.Column("gpu_seconds", sa.Float, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )
    op.create_index("ix_sdl_job_energy_user", "sdl_job_energy", ["user"])
    op.create_index("ix_sdl_job_energy_account", "sdl_job_energy", ["account"])


def downgrade() -> None:
    op.drop_index("ix_sdl_job_energy_account", table_name="sdl_job_energy")
    op.drop_index("ix_sdl_job_energy_user", table_name="sdl_job_energy")
    op.drop_table("sdl_job_energy")
