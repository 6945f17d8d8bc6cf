"""The schema's compatibility marker: the oldest memabra schema head whose code may still run on
this database.

``schema_compatibility`` holds one row, ``oldest_compatible_revision``, written after every
migration step in that step's transaction from what each migration declares in
``BREAKS_OLDER_CODE`` (``storage/_schema_compat.py``). A process whose code is older than the
database opens it when its own head is at or after the marker (with a warning), and refuses it
otherwise, naming the revision that broke compatibility.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # a new table that older code never reads


def upgrade() -> None:
    op.create_table(
        "schema_compatibility",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("oldest_compatible_revision", sa.String(length=32), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_schema_compatibility_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schema_compatibility")),
    )


def downgrade() -> None:
    op.drop_table("schema_compatibility")
