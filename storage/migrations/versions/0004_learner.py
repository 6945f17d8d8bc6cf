"""The production loop: a commit-order position on final rewards, the learner's checkpoint, and the
learner lease.

``rewards.commit_seq`` orders final rewards the way a learner must read them. It is set by a trigger
when a reward becomes final, so every writer gets it without knowing about it:

* PostgreSQL: the finalising transaction's id (``pg_current_xact_id()``). Ids are not commit order,
  but a reader that only takes ids below the oldest running transaction
  (``pg_snapshot_xmin(pg_current_snapshot())``) never sees a smaller id commit later.
* SQLite: one more than the largest so far. SQLite has one writer at a time and the trigger runs
  while that writer holds the lock, so the numbers follow commit order.

``learner_state`` is the learner's checkpoint (the snapshot it last wrote and the position it had
read to, written in one transaction). ``learner_leases`` is the lease row SQLite uses (PostgreSQL
uses an advisory lock). On PostgreSQL a trigger NOTIFYs ``memabra_policy`` when a snapshot becomes
active, so serving processes reload at once instead of at their next poll.

Revision ID: 0004
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0002"
branch_labels = None
depends_on = None

# An older learner takes no lease and keeps no checkpoint: restarted next to a learner of this
# revision, both would learn the same final rewards.
BREAKS_OLDER_CODE = True

_PG_SEQ_FUNCTION = """
CREATE FUNCTION memabra_reward_commit_seq() RETURNS trigger AS $$
BEGIN
    IF NEW.final AND NEW.commit_seq IS NULL THEN
        NEW.commit_seq := pg_current_xact_id()::text::bigint;
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql
"""
_PG_SEQ_TRIGGER = """
CREATE TRIGGER rewards_commit_seq BEFORE INSERT OR UPDATE ON rewards
FOR EACH ROW EXECUTE FUNCTION memabra_reward_commit_seq()
"""
_PG_NOTIFY_FUNCTION = """
CREATE FUNCTION memabra_snapshot_notify() RETURNS trigger AS $$
BEGIN
    IF NEW.status = 'active' THEN
        PERFORM pg_notify('memabra_policy', current_schema() || ' ' || NEW.policy || ' ' || NEW.version);
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql
"""
_PG_NOTIFY_TRIGGER = """
CREATE TRIGGER policy_snapshots_notify AFTER INSERT OR UPDATE OF status ON policy_snapshots
FOR EACH ROW EXECUTE FUNCTION memabra_snapshot_notify()
"""
_SQLITE_NEXT = "(SELECT COALESCE(MAX(commit_seq), 0) + 1 FROM rewards)"
_SQLITE_TRIGGERS = (
    f"""
CREATE TRIGGER rewards_commit_seq_insert AFTER INSERT ON rewards
WHEN NEW.final AND NEW.commit_seq IS NULL
BEGIN UPDATE rewards SET commit_seq = {_SQLITE_NEXT} WHERE episode_id = NEW.episode_id; END
""",
    f"""
CREATE TRIGGER rewards_commit_seq_update AFTER UPDATE OF final ON rewards
WHEN NEW.final AND NOT OLD.final AND NEW.commit_seq IS NULL
BEGIN UPDATE rewards SET commit_seq = {_SQLITE_NEXT} WHERE episode_id = NEW.episode_id; END
""",
)


def upgrade() -> None:
    with op.batch_alter_table("rewards") as batch:
        batch.add_column(sa.Column("commit_seq", sa.BigInteger(), nullable=True))
        batch.create_index("ix_rewards_commit_seq_episode_id", ["commit_seq", "episode_id"])
    op.create_table(
        "learner_state",
        sa.Column("policy", sa.String(length=100), nullable=False),
        sa.Column("snapshot_version", sa.String(length=100), nullable=True),
        sa.Column("position_seq", sa.BigInteger(), nullable=False),
        sa.Column("position_episode", sa.String(length=32), nullable=False),
        sa.Column("learned", sa.BigInteger(), nullable=False),
        sa.Column("published", sa.String(length=100), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("policy", name=op.f("pk_learner_state")),
    )
    op.create_table(
        "learner_leases",
        sa.Column("policy", sa.String(length=100), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("policy", name=op.f("pk_learner_leases")),
    )
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        # Rewards already final share the migration's transaction id, ordered by episode id.
        op.execute("UPDATE rewards SET commit_seq = pg_current_xact_id()::text::bigint WHERE final")
        for statement in (_PG_SEQ_FUNCTION, _PG_SEQ_TRIGGER, _PG_NOTIFY_FUNCTION, _PG_NOTIFY_TRIGGER):
            op.execute(statement)
    else:
        op.execute(
            "UPDATE rewards SET commit_seq = (SELECT n FROM (SELECT episode_id AS e, ROW_NUMBER() "
            "OVER (ORDER BY computed_at, episode_id) AS n FROM rewards WHERE final) WHERE e = rewards.episode_id) "
            "WHERE final"
        )
        for statement in _SQLITE_TRIGGERS:
            op.execute(statement)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS policy_snapshots_notify ON policy_snapshots")
        op.execute("DROP FUNCTION IF EXISTS memabra_snapshot_notify()")
        op.execute("DROP TRIGGER IF EXISTS rewards_commit_seq ON rewards")
        op.execute("DROP FUNCTION IF EXISTS memabra_reward_commit_seq()")
    else:
        op.execute("DROP TRIGGER IF EXISTS rewards_commit_seq_insert")
        op.execute("DROP TRIGGER IF EXISTS rewards_commit_seq_update")
    op.drop_table("learner_leases")
    op.drop_table("learner_state")
    with op.batch_alter_table("rewards") as batch:
        batch.drop_index("ix_rewards_commit_seq_episode_id")
        batch.drop_column("commit_seq")
