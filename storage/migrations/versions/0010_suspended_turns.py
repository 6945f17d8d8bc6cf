"""Turns paused by a LangGraph interrupt, kept so that any process can resume them.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # a new table that older code neither reads nor needs


def upgrade() -> None:
    op.create_table(
        "suspended_turns",
        sa.Column("turn_id", sa.String(length=32), nullable=False),
        sa.Column("episode_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("thread_id", sa.String(length=200), nullable=True),
        sa.Column("suspended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("document", _JSON, nullable=False),
        sa.PrimaryKeyConstraint("turn_id", name=op.f("pk_suspended_turns")),
        sa.UniqueConstraint("episode_id", name=op.f("uq_suspended_turns_episode_id")),
    )
    op.create_index(op.f("ix_suspended_turns_user_id"), "suspended_turns", ["user_id"])
    op.create_index(op.f("ix_suspended_turns_suspended_at"), "suspended_turns", ["suspended_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_suspended_turns_suspended_at"), table_name="suspended_turns")
    op.drop_index(op.f("ix_suspended_turns_user_id"), table_name="suspended_turns")
    op.drop_table("suspended_turns")
