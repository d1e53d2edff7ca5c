"""The ledger's logs (the history of finished jobs' GPU-seconds, the finished records the
history learner reads, the runs the throughput model learns from) in rows of their own, one
per entry, each written once.

The ``sdl_ledger`` document held them whole and was rewritten every cycle: near their bounds
(200,000 history entries, 20,000 records, 20,000 runs) several MB a cycle for the few entries
a cycle adds. A document that still holds them (saved before this revision) is read as it is,
and the next cycle moves them into rows.

Revision ID: 0005
Revises: 0004
"""

from alembic import op
import sqlalchemy as sa

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sdl_ledger_entry",
        sa.Column("log", sa.String, primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("data", sa.String, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sdl_ledger_entry")
