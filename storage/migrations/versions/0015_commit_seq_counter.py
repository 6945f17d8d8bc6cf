"""Final rewards numbered by a counter that only grows, on SQLite.

SQLite's triggers of revision 0004 numbered a reward made final one past the largest
``rewards.commit_seq`` still stored. Deleting the rewards at the top of that order (retention,
``memabra episodes delete``, a user's erasure) then gave their numbers again: the next reward was
numbered at or before a learner's read position (or an incremental export's cursor) and never read.
The triggers now number from ``reward_commit_counter``'s one row, which only grows; it starts past
every number stored and every learner's position, so no position is ahead of a new reward.
PostgreSQL numbers rewards by transaction id, never given twice: the table is created there too
(one schema on both backends) and left unused.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# older code never numbers rewards itself: the triggers in the database do, for every writer
BREAKS_OLDER_CODE = False

_NEXT = "UPDATE reward_commit_counter SET last_seq = last_seq + 1 WHERE id = 1"
_SET = (
    "UPDATE rewards SET commit_seq = (SELECT last_seq FROM reward_commit_counter WHERE id = 1) "
    "WHERE episode_id = NEW.episode_id"
)
_SQLITE_TRIGGERS = (
    f"""
CREATE TRIGGER rewards_commit_seq_insert AFTER INSERT ON rewards
WHEN NEW.final AND NEW.commit_seq IS NULL
BEGIN {_NEXT}; {_SET}; END
""",
    f"""
CREATE TRIGGER rewards_commit_seq_update AFTER UPDATE OF final ON rewards
WHEN NEW.final AND NOT OLD.final AND NEW.commit_seq IS NULL
BEGIN {_NEXT}; {_SET}; END
""",
)
# revision 0004's, restored by a downgrade
_OLD_NEXT = "(SELECT COALESCE(MAX(commit_seq), 0) + 1 FROM rewards)"
_OLD_SQLITE_TRIGGERS = (
    f"""
CREATE TRIGGER rewards_commit_seq_insert AFTER INSERT ON rewards
WHEN NEW.final AND NEW.commit_seq IS NULL
BEGIN UPDATE rewards SET commit_seq = {_OLD_NEXT} WHERE episode_id = NEW.episode_id; END
""",
    f"""
CREATE TRIGGER rewards_commit_seq_update AFTER UPDATE OF final ON rewards
WHEN NEW.final AND NOT OLD.final AND NEW.commit_seq IS NULL
BEGIN UPDATE rewards SET commit_seq = {_OLD_NEXT} WHERE episode_id = NEW.episode_id; END
""",
)


def upgrade() -> None:
    op.create_table(
        "reward_commit_counter",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_reward_commit_counter_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reward_commit_counter")),
    )
    # past every number a reward holds and every position a learner read up to (a number given
    # twice before this revision may sit below a position: it must not be given a third time)
    op.execute(
        "INSERT INTO reward_commit_counter (id, last_seq) SELECT 1, MAX(n) FROM ("
        "SELECT COALESCE(MAX(commit_seq), 0) AS n FROM rewards "
        "UNION ALL SELECT COALESCE(MAX(position_seq), 0) FROM learner_state) AS seen"
    )
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS rewards_commit_seq_insert")
        op.execute("DROP TRIGGER IF EXISTS rewards_commit_seq_update")
        for statement in _SQLITE_TRIGGERS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS rewards_commit_seq_insert")
        op.execute("DROP TRIGGER IF EXISTS rewards_commit_seq_update")
        for statement in _OLD_SQLITE_TRIGGERS:
            op.execute(statement)
    op.drop_table("reward_commit_counter")
