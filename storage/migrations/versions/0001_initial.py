"""Initial schema: episodes, decisions with every offered candidate and slot distribution,
steps, feedback, rewards by component, policy snapshots, and the memory/skill/tool registry.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # the first schema: no older code to break


def upgrade() -> None:
    op.create_table(
        "episodes",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("thread_id", sa.String(length=200), nullable=True),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("feedback_due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finalized_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("policy_version", sa.String(length=100), nullable=True),
        sa.Column("kinds", sa.String(length=40), nullable=False),
        sa.Column("reward_total", sa.Float(), nullable=True),
        sa.Column("corrected", sa.Boolean(), nullable=False),
        sa.Column("used_ids", _JSON, nullable=True),
        sa.Column("metadata", _JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_episodes")),
    )
    op.create_index(op.f("ix_episodes_corrected_created_at"), "episodes", ["corrected", "created_at"])
    op.create_index(op.f("ix_episodes_created_at_id"), "episodes", ["created_at", "id"])
    op.create_index(op.f("ix_episodes_finalized_at_feedback_due_at"), "episodes", ["finalized_at", "feedback_due_at"])
    op.create_index(op.f("ix_episodes_policy_version_created_at"), "episodes", ["policy_version", "created_at"])
    op.create_index(op.f("ix_episodes_reward_total"), "episodes", ["reward_total"])
    op.create_index(op.f("ix_episodes_user_id_created_at"), "episodes", ["user_id", "created_at"])

    op.create_table(
        "policy_snapshots",
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("policy", sa.String(length=100), nullable=False),
        sa.Column("parent", sa.String(length=100), nullable=True),
        sa.Column("model", sa.LargeBinary(), nullable=False),
        sa.Column("learner_args", _JSON, nullable=False),
        sa.Column("metrics", _JSON, nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["parent"],
            ["policy_snapshots.version"],
            name=op.f("fk_policy_snapshots_parent_policy_snapshots"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("version", name=op.f("pk_policy_snapshots")),
    )
    op.create_index(op.f("ix_policy_snapshots_policy_created_at"), "policy_snapshots", ["policy", "created_at"])

    op.create_table(
        "registry",
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=100), nullable=False),
        sa.Column("metadata", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_chosen_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("times_chosen", sa.Integer(), nullable=False),
        sa.Column("times_used", sa.Integer(), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("kind", "owner", "id", name=op.f("pk_registry")),
    )
    op.create_index(op.f("ix_registry_owner_kind"), "registry", ["owner", "kind"])

    op.create_table(
        "decisions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("episode_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.String(length=200), nullable=True),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("kinds", _JSON, nullable=False),
        sa.Column("slots_budget", _JSON, nullable=False),
        sa.Column("token_budget", sa.Integer(), nullable=True),
        sa.Column("policy", sa.String(length=100), nullable=False),
        sa.Column("policy_version", sa.String(length=100), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("propensity", sa.Float(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("tokens_injected", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name=op.f("fk_decisions_episode_id_episodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
    )
    op.create_index(op.f("ix_decisions_created_at"), "decisions", ["created_at"])
    op.create_index(op.f("ix_decisions_episode_id"), "decisions", ["episode_id"])
    op.create_index(op.f("ix_decisions_policy_version"), "decisions", ["policy_version"])
    op.create_index(op.f("ix_decisions_user_id"), "decisions", ["user_id"])

    op.create_table(
        "rewards",
        sa.Column("episode_id", sa.String(length=32), nullable=False),
        sa.Column("s", sa.Float(), nullable=False),
        sa.Column("hm", sa.Float(), nullable=True),
        sa.Column("hs", sa.Float(), nullable=True),
        sa.Column("ht", sa.Float(), nullable=True),
        sa.Column("e", sa.Float(), nullable=False),
        sa.Column("c", sa.Float(), nullable=False),
        sa.Column("l", sa.Float(), nullable=False),
        sa.Column("x", sa.Float(), nullable=False),
        sa.Column("u", sa.Float(), nullable=False),
        sa.Column("weights", _JSON, nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.Column("reward_version", sa.String(length=40), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("learned_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name=op.f("fk_rewards_episode_id_episodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("episode_id", name=op.f("pk_rewards")),
    )
    op.create_index(op.f("ix_rewards_final_learned_at"), "rewards", ["final", "learned_at"])

    op.create_table(
        "steps",
        sa.Column("episode_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("arguments", _JSON, nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name=op.f("fk_steps_episode_id_episodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("episode_id", "seq", name=op.f("pk_steps")),
    )
    op.create_table(
        "decision_candidates",
        sa.Column("decision_id", sa.String(length=32), nullable=False),
        sa.Column("candidate_id", sa.String(length=200), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("metadata", _JSON, nullable=False),
        sa.Column("features", _JSON, nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("probability", sa.Float(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=True),
        sa.Column("chosen", sa.Boolean(), nullable=False),
        sa.Column("used", sa.Boolean(), nullable=True),
        sa.ForeignKeyConstraint(
            ["decision_id"],
            ["decisions.id"],
            name=op.f("fk_decision_candidates_decision_id_decisions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("decision_id", "candidate_id", name=op.f("pk_decision_candidates")),
    )
    op.create_index(
        op.f("ix_decision_candidates_user_id_candidate_id"), "decision_candidates", ["user_id", "candidate_id"]
    )

    op.create_table(
        "decision_slots",
        sa.Column("decision_id", sa.String(length=32), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("candidate_ids", _JSON, nullable=False),
        sa.Column("probabilities", _JSON, nullable=False),
        sa.Column("chosen_id", sa.String(length=200), nullable=False),
        sa.Column("chosen_probability", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["decision_id"], ["decisions.id"], name=op.f("fk_decision_slots_decision_id_decisions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("decision_id", "slot", name=op.f("pk_decision_slots")),
    )
    op.create_table(
        "feedback",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("episode_id", sa.String(length=32), nullable=False),
        sa.Column("decision_id", sa.String(length=32), nullable=True),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=False),
        sa.Column("payload", _JSON, nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("late", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["decision_id"], ["decisions.id"], name=op.f("fk_feedback_decision_id_decisions"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name=op.f("fk_feedback_episode_id_episodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feedback")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_feedback_idempotency_key")),
    )
    op.create_index(op.f("ix_feedback_episode_id"), "feedback", ["episode_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_feedback_episode_id"), table_name="feedback")

    op.drop_table("feedback")
    op.drop_table("decision_slots")
    op.drop_index(op.f("ix_decision_candidates_user_id_candidate_id"), table_name="decision_candidates")

    op.drop_table("decision_candidates")
    op.drop_table("steps")
    op.drop_index(op.f("ix_rewards_final_learned_at"), table_name="rewards")

    op.drop_table("rewards")
    op.drop_index(op.f("ix_decisions_user_id"), table_name="decisions")
    op.drop_index(op.f("ix_decisions_policy_version"), table_name="decisions")
    op.drop_index(op.f("ix_decisions_episode_id"), table_name="decisions")
    op.drop_index(op.f("ix_decisions_created_at"), table_name="decisions")

    op.drop_table("decisions")
    op.drop_index(op.f("ix_registry_owner_kind"), table_name="registry")

    op.drop_table("registry")
    op.drop_index(op.f("ix_policy_snapshots_policy_created_at"), table_name="policy_snapshots")

    op.drop_table("policy_snapshots")
    op.drop_index(op.f("ix_episodes_user_id_created_at"), table_name="episodes")
    op.drop_index(op.f("ix_episodes_reward_total"), table_name="episodes")
    op.drop_index(op.f("ix_episodes_policy_version_created_at"), table_name="episodes")
    op.drop_index(op.f("ix_episodes_finalized_at_feedback_due_at"), table_name="episodes")
    op.drop_index(op.f("ix_episodes_created_at_id"), table_name="episodes")
    op.drop_index(op.f("ix_episodes_corrected_created_at"), table_name="episodes")

    op.drop_table("episodes")
