"""The audit trail of episode deletions and user erasures: who deleted what (ids, a user, a
retention cut-off), when, from where, and how many episodes (and an erasure's memories) went.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # a new table


def upgrade() -> None:
    op.create_table(
        "episode_deletions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("progressed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("client", sa.String(length=200), nullable=True),
        sa.Column("named", sa.Integer(), nullable=False),
        sa.Column("episode_ids", _JSON, nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=True),
        sa.Column("created_before", sa.DateTime(timezone=True), nullable=True),
        sa.Column("include_unlearned", sa.Boolean(), nullable=False),
        sa.Column("kept", sa.Integer(), nullable=False),
        sa.Column("deleted", sa.Integer(), nullable=False),
        sa.Column("memories_forgotten", sa.Integer(), nullable=True),
        sa.Column("threads_deleted", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_episode_deletions")),
    )
    op.create_index(op.f("ix_episode_deletions_started_at"), "episode_deletions", ["started_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_episode_deletions_started_at"), table_name="episode_deletions")
    op.drop_table("episode_deletions")
