"""An index on ``feedback.decision_id``: deleting a decision cascades to its feedback, and without
the index PostgreSQL scans the whole feedback table once per deleted decision. Built concurrently
on PostgreSQL before the migration's transaction (``storage/_online_index.py``).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

from memabra.storage._online_index import OnlineIndex, has_index

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # an index


# on PostgreSQL, built concurrently before this migration runs (a large feedback table would
# otherwise hold every feedback write for the length of the build)
ONLINE_INDEXES = (OnlineIndex("ix_feedback_decision_id", "feedback", ("decision_id",)),)


def upgrade() -> None:
    if not has_index(op.get_bind(), "feedback", "ix_feedback_decision_id"):
        op.create_index(op.f("ix_feedback_decision_id"), "feedback", ["decision_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_feedback_decision_id"), table_name="feedback")
