"""An index on ``feedback.decision_id``: deleting a decision cascades to its feedback, and without
the index PostgreSQL scans the whole feedback table once per deleted decision.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(op.f("ix_feedback_decision_id"), "feedback", ["decision_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_feedback_decision_id"), table_name="feedback")
