"""Memory management: retired memories (superseded by a newer fact), their history, and
embeddings stored once for every process.

Revision ID: 0005
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Superseded memories now stay in the registry with retired_at set; older code does not read the
# column and would recall them as live.
BREAKS_OLDER_CODE = True


def upgrade() -> None:
    with op.batch_alter_table("registry") as batch:
        batch.add_column(sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("superseded_by", sa.String(length=200), nullable=True))
    op.create_table(
        "memory_history",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("memory_id", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=20), nullable=False),
        sa.Column("old_text", sa.Text(), nullable=True),
        sa.Column("new_text", sa.Text(), nullable=True),
        sa.Column("episode_id", sa.String(length=32), nullable=True),
        sa.Column("reason", sa.String(length=200), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_history")),
    )
    op.create_index(op.f("ix_memory_history_owner_memory_id_at"), "memory_history", ["owner", "memory_id", "at"])
    op.create_table(
        "memory_pools",
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_memory_pools")),
    )
    op.create_table(
        "embeddings",
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("text_sha256", sa.String(length=64), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model", "text_sha256", name=op.f("pk_embeddings")),
    )


def downgrade() -> None:
    op.drop_table("embeddings")
    op.drop_table("memory_pools")
    op.drop_index(op.f("ix_memory_history_owner_memory_id_at"), table_name="memory_history")
    op.drop_table("memory_history")
    with op.batch_alter_table("registry") as batch:
        batch.drop_column("superseded_by")
        batch.drop_column("retired_at")
