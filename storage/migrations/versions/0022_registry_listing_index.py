"""An index on ``registry (owner, kind, created_at, id)``: ``memabra memories list`` shows one
user's memories newest first, a page at a time (``storage/_memory_listing.py``). With only
``(owner, kind)`` a page read every memory of the user and sorted them (a user with 100,000
memories: every row for a page of 100); with this one it reads the page's rows and stops. Built
concurrently on PostgreSQL before the migration's transaction (``storage/_online_index.py``).

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

from alembic import op

from memabra.storage._online_index import OnlineIndex, has_index

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # an index

_NAME = "ix_registry_owner_kind_created_at_id"
_COLUMNS = ("owner", "kind", "created_at", "id")

# on PostgreSQL, built concurrently before this migration runs: agents write memories all the time
ONLINE_INDEXES = (OnlineIndex(_NAME, "registry", _COLUMNS),)


def upgrade() -> None:
    if not has_index(op.get_bind(), "registry", _NAME):
        op.create_index(_NAME, "registry", list(_COLUMNS))


def downgrade() -> None:
    op.drop_index(_NAME, table_name="registry")
