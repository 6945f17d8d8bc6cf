"""At most one active snapshot per policy, held by the database, and what a promote replaced.

* ``policy_snapshots.previous_active``: the snapshot of the policy that was active when this one
  was made active by a promote or a learner's publish. A rollback re-activates it (a snapshot's
  parent is not always what served before it: a model trained from the log names the snapshot
  active when it was trained). Rows activated before this revision have none; their rollback
  falls back to the parent.
* ``uq_policy_snapshots_one_active``: a unique partial index on ``policy`` where ``status =
  'active'`` (SQLite and PostgreSQL). Until now only the code (and on PostgreSQL an advisory lock)
  kept a second snapshot from being active. A policy found with several active snapshots keeps the
  newest (by ``created_at``, then version: the one serving processes load) and the others are
  retired, each named in a warning on the ``memabra`` logger, before the index is built.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# Code at 0010 promotes and rolls back by making the new snapshot active before it retires the
# old one: the unique index refuses that first UPDATE.
BREAKS_OLDER_CODE = True

logger = logging.getLogger("memabra")

_INDEX = "uq_policy_snapshots_one_active"
_ACTIVE = sa.text("status = 'active'")


def upgrade() -> None:
    op.add_column("policy_snapshots", sa.Column("previous_active", sa.String(length=100), nullable=True))
    _retire_extra_actives(op.get_bind())
    op.create_index(
        op.f(_INDEX), "policy_snapshots", ["policy"], unique=True, sqlite_where=_ACTIVE, postgresql_where=_ACTIVE
    )


def downgrade() -> None:
    op.drop_index(op.f(_INDEX), table_name="policy_snapshots")
    if op.get_bind().dialect.name == "sqlite":
        # native DROP COLUMN (SQLite 3.35+): a batch copy of the table would drop and recreate it,
        # and dropping it sets ope_runs.snapshot_version to NULL through its foreign key
        op.execute("ALTER TABLE policy_snapshots DROP COLUMN previous_active")
    else:
        op.drop_column("policy_snapshots", "previous_active")


def _retire_extra_actives(bind: sa.Connection) -> None:
    rows = bind.execute(
        sa.text(
            "SELECT policy, version FROM policy_snapshots WHERE status = 'active' "
            "ORDER BY policy, created_at DESC, version DESC"
        )
    ).all()
    by_policy: dict[str, list[str]] = {}
    for policy, version in rows:
        by_policy.setdefault(policy, []).append(version)
    for policy, versions in by_policy.items():
        kept, extra = versions[0], versions[1:]
        if not extra:
            continue
        for version in extra:
            bind.execute(sa.text("UPDATE policy_snapshots SET status = 'retired' WHERE version = :v"), {"v": version})
        logger.warning(
            "policy %s had %d active snapshots; kept %s (the newest, which serving loads) and retired %s",
            policy,
            len(versions),
            kept,
            ", ".join(extra),
        )
