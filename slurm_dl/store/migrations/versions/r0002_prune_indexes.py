"""Indexes for pruning and for open preemptions: sdl_decision.at, sdl_preemption.state.

Every hundredth cycle deletes decisions older than the retention by ``at``, and every cycle
reads the open preemptions by ``state``; without an index both scan the whole table, which
grows with the cluster.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_sdl_decision_at", "sdl_decision", ["at"])
    op.create_index("ix_sdl_preemption_state", "sdl_preemption", ["state"])


def downgrade() -> None:
    op.drop_index("ix_sdl_preemption_state", table_name="sdl_preemption")
    op.drop_index("ix_sdl_decision_at", table_name="sdl_decision")
