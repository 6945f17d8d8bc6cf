"""Admin sessions ended by logout before their cookie expired (server-side revocation).

Revision ID: 0007
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0005"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # a new table


def upgrade() -> None:
    op.create_table(
        "admin_revoked_sessions",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_admin_revoked_sessions")),
    )
    op.create_index(op.f("ix_admin_revoked_sessions_expires_at"), "admin_revoked_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_admin_revoked_sessions_expires_at"), table_name="admin_revoked_sessions")
    op.drop_table("admin_revoked_sessions")
