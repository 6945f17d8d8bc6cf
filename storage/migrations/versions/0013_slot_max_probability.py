"""Each slot draw's largest probability, stored when the decision is logged.

``decision_slots.max_probability``: the maximum of the draw's ``probabilities``. The admin view's
policies page tells an explored draw (its chosen probability below the slot's maximum) from a
greedy one for each draw of the latest 10,000 decisions; reading the maximum out of every draw's
JSON distribution was most of that page's time on PostgreSQL.

The column is nullable without a default, so adding it changes the catalog only (no rewrite of
the table on either backend), and existing rows are not backfilled: a backfill rewrites every row of the
largest table in the log under one long lock (and on PostgreSQL a full copy of its rows), which a
production log cannot afford at upgrade time. Readers take the stored value where there is one and
compute it from the JSON where it is NULL, so rows logged before this revision read as before.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # a nullable column; readers compute it where it is NULL


def upgrade() -> None:
    op.add_column("decision_slots", sa.Column("max_probability", sa.Float(), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # native DROP COLUMN (SQLite 3.35+): a batch copy of the table would drop and recreate it,
        # taking its rows through a full rewrite for a column that holds nothing the others lack
        op.execute("ALTER TABLE decision_slots DROP COLUMN max_probability")
    else:
        op.drop_column("decision_slots", "max_probability")
