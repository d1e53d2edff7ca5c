"""The leader lease: one prioritizer acts on Slurm, the others stand by.

``sdl_leader`` holds the lease (holder, epoch, since and until when); the epoch of the daemon that wrote it
is recorded with every ledger save, SiteFactor row, preemption and resize step, so a record
says which leader made it, and a paused leader that wakes up after a take-over cannot write.

Revision ID: 0007
Revises: 0006
"""

from alembic import op
import sqlalchemy as sa

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_EPOCH_TABLES = ("sdl_ledger", "sdl_site_factor", "sdl_preemption", "sdl_resize")


def upgrade() -> None:
    op.create_table(
        "sdl_leader",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("holder", sa.String, nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("host", sa.String, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("renewed_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("taken_at", sa.Float, nullable=False, server_default="0"),
    )
    for table in _EPOCH_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("epoch", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    for table in _EPOCH_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("epoch")
    op.drop_table("sdl_leader")
