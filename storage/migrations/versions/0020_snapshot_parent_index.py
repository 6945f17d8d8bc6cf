"""An index on ``policy_snapshots.parent``: deleting a snapshot sets its children's ``parent`` to
NULL (``ON DELETE SET NULL``), and without the index each deleted snapshot scanned the whole table,
so ``memabra policies prune`` grew with the square of the snapshots (8,000 took 24 s on SQLite and
7 s on PostgreSQL, in one transaction that held every learner commit back). Built concurrently on
PostgreSQL before the migration's transaction (``storage/_online_index.py``).

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from alembic import op

from memabra.storage._online_index import OnlineIndex, has_index

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # an index

_NAME = "ix_policy_snapshots_parent"

# on PostgreSQL, built concurrently before this migration runs: a learner may be committing snapshots
ONLINE_INDEXES = (OnlineIndex(_NAME, "policy_snapshots", ("parent",)),)


def upgrade() -> None:
    if not has_index(op.get_bind(), "policy_snapshots", _NAME):
        op.create_index(_NAME, "policy_snapshots", ["parent"])


def downgrade() -> None:
    op.drop_index(_NAME, table_name="policy_snapshots")
