"""MemPO labels keyed by (decision, scorer): each scorer keeps its own label of a decision.

``memory_scores`` was keyed by the decision alone, so two models scoring the same log (a small one
nightly, a large one weekly) replaced each other's labels: each run rescored what the other had
just labelled, and each scorer's labels were only the decisions the other had not redone. The
primary key becomes ``(decision_id, scorer)``; every stored label stays, under its scorer (the old
key allowed one per decision, so none collide). Deleting a decision still deletes its labels
through the foreign key, every scorer's; the key's first column keeps that delete an index lookup.

On SQLite the table is copied into one with the new key (SQLite cannot change a primary key in
place); on PostgreSQL the key is dropped and added, which rebuilds its index while the table is
locked: only ``mempo score`` writes it and deleting decisions (retention, erasure) cascades into
it, and those wait for the build; serving processes never touch it.

The downgrade keeps one label per decision, the newest (by ``scored_at``, then scorer name), as
the old key demands, and says in a warning how many it deleted.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# Additive for what older code must get right: its agents, learner and evaluation never read the
# table, its `mempo score` filters what is left by scorer and its writes fit the new key. What it
# gets wrong is derived data a rerun restores: its `mempo score` deletes the other scorers' labels
# of the decisions it stores, its unfiltered reads keep one of a decision's labels, and its
# `rewards recompute --use-mempo` averages every scorer's (docs/production.md says so). Marked
# breaking, every older agent starting during a roll would be refused for that.
BREAKS_OLDER_CODE = False

logger = logging.getLogger("memabra")

_TABLE = "memory_scores"
_PK = "pk_memory_scores"


def upgrade() -> None:
    _set_key(["decision_id", "scorer"])


def downgrade() -> None:
    # one label per decision, as the old key demands: the newest, ties to the last scorer by name
    deleted = op.get_bind().execute(
        sa.text(
            "DELETE FROM memory_scores WHERE EXISTS (SELECT 1 FROM memory_scores AS newer "
            "WHERE newer.decision_id = memory_scores.decision_id AND (newer.scored_at > memory_scores.scored_at "
            "OR (newer.scored_at = memory_scores.scored_at AND newer.scorer > memory_scores.scorer)))"
        )
    )
    if deleted.rowcount:
        logger.warning(
            "deleted %d MemPO labels of decisions that other scorers had labelled too: schema 0017 keeps one "
            "label per decision (the newest is kept)",
            deleted.rowcount,
        )
    _set_key(["decision_id"])


def _set_key(columns: list[str]) -> None:
    if op.get_bind().dialect.name == "sqlite":
        # a copy of the table with the new key: it is referenced by no other table, so dropping the
        # old one deletes nothing elsewhere
        with op.batch_alter_table(_TABLE, recreate="always") as batch:
            batch.drop_constraint(_PK, type_="primary")
            batch.create_primary_key(_PK, columns)
    else:
        op.drop_constraint(_PK, _TABLE, type_="primary")
        op.create_primary_key(_PK, _TABLE, columns)
