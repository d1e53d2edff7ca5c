"""The ledger's job records in rows of their own, each rewritten only when it changed.

A cycle used to rewrite the whole ledger as one document; at 100,000 jobs that was 12 MB a
cycle, most of it records that had not changed. ``sdl_ledger_job`` holds one row per record;
the ``sdl_ledger`` document keeps the rest. A document that still holds its records (saved
before this revision) is read as it is, and the next cycle moves them into rows.

Revision ID: 0004
Revises: 0003
"""

from alembic import op
import sqlalchemy as sa

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sdl_ledger_job",
        sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("data", sa.String, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sdl_ledger_job")
