"""An index on ``memory_scores (reward, scorer, decision_id)``: the admin's "MemPO verdict -1"
filter reads the decisions a scorer (or any) graded -1 from it alone; without it every filtered
page view scanned the labels table up to four times on SQLite. Built concurrently on PostgreSQL
before the migration's transaction (``storage/_online_index.py``).

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

from alembic import op

from memabra.storage._online_index import OnlineIndex, has_index

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # an index

_NAME = "ix_memory_scores_reward"
_COLUMNS = ("reward", "scorer", "decision_id")

# on PostgreSQL, built concurrently before this migration runs: `mempo score` may be writing labels
ONLINE_INDEXES = (OnlineIndex(_NAME, "memory_scores", _COLUMNS),)


def upgrade() -> None:
    if not has_index(op.get_bind(), "memory_scores", _NAME):
        op.create_index(_NAME, "memory_scores", list(_COLUMNS))


def downgrade() -> None:
    op.drop_index(_NAME, table_name="memory_scores")
