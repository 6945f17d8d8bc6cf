"""An index on ``feedback (source, episode_id)``: the episode listing's failed-turn filter
(``memabra episodes list --failed``, the admin's "failed" filter and its count) asks for the
episodes with a feedback row from ``memabra.failed_turn``. Without the index PostgreSQL answered by
scanning the whole feedback table on every page view (and again for the page's count) whenever
failed turns are rare or old, the usual case. Built concurrently on PostgreSQL before the
migration's transaction (``storage/_online_index.py``).

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

from alembic import op

from memabra.storage._online_index import OnlineIndex, has_index

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # an index

_NAME = "ix_feedback_source_episode_id"
_COLUMNS = ("source", "episode_id")

# on PostgreSQL, built concurrently before this migration runs: agents write feedback all the time
ONLINE_INDEXES = (OnlineIndex(_NAME, "feedback", _COLUMNS),)


def upgrade() -> None:
    if not has_index(op.get_bind(), "feedback", _NAME):
        op.create_index(_NAME, "feedback", list(_COLUMNS))


def downgrade() -> None:
    op.drop_index(_NAME, table_name="feedback")
