"""Turns kept in the log from the moment they are routed, not only once an interrupt pauses them.

``suspended_turns.paused``: true for a turn an interrupt paused (every row before this revision),
false for a turn kept while it runs, so that a process that dies mid-turn leaves its routing
decision in the log (a run retried from its checkpoint goes on with it; ``memabra episodes paused
--abandon`` logs it as failed) instead of losing it.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# Rows changed meaning: a running turn (paused false) reads as a paused one to code at 0011, which
# would list, resume or abandon it as paused.
BREAKS_OLDER_CODE = True


def upgrade() -> None:
    op.add_column("suspended_turns", sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.true()))


def downgrade() -> None:
    # the older schema keeps paused turns only: a running turn's copy would read as paused there
    op.execute("DELETE FROM suspended_turns WHERE NOT paused")
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE suspended_turns DROP COLUMN paused")
    else:
        op.drop_column("suspended_turns", "paused")
