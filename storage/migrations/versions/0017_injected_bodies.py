"""Every skill body and tool schema a release registered, kept under its digest.

The registry keeps one row per skill or tool id, replaced by each release that edits it, so an old
decision could only be reviewed with today's skill body. ``injected_bodies`` keeps each body once,
content-addressed (see :mod:`memabra.storage._injected_bodies`); logged skill and tool candidates
name its digest in their metadata. Nothing is backfilled: decisions logged before this revision
name no digest (the review says so), and the bodies of today's releases are written when their
processes next register them.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# a new table: older code neither reads nor writes it (its decisions name no digest, shown as
# "not kept"), and a newer process's metadata key is ignored by older readers
BREAKS_OLDER_CODE = False


def upgrade() -> None:
    op.create_table(
        "injected_bodies",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_injected_bodies")),
    )


def downgrade() -> None:
    op.drop_table("injected_bodies")
