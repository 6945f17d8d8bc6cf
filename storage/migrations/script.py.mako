"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

# Required (storage/_schema_compat.py): True when code at the previous revision cannot run on the
# schema this one leaves (a dropped, renamed or newly NOT NULL column, a constraint older writes can
# violate, rows whose meaning changed); False when it only adds (tables, nullable columns, indexes).
# Left as ..., the upgrade fails and so does test_every_migration_declares_whether_it_breaks_older_code.
BREAKS_OLDER_CODE = ...


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
