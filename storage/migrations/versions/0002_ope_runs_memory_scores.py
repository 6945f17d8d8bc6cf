"""Offline-evaluation results per policy and estimator; MemPO memory-quality labels per decision;
an index for reading one conversation.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False  # new tables and an index


def upgrade() -> None:
    op.create_table(
        "ope_runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("policy", sa.String(length=200), nullable=False),
        sa.Column("snapshot_version", sa.String(length=100), nullable=True),
        sa.Column("estimator", sa.String(length=40), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("ci_low", sa.Float(), nullable=False),
        sa.Column("ci_high", sa.Float(), nullable=False),
        sa.Column("n_rounds", sa.Integer(), nullable=False),
        sa.Column("alpha", sa.Float(), nullable=False),
        sa.Column("details", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["snapshot_version"],
            ["policy_snapshots.version"],
            name=op.f("fk_ope_runs_snapshot_version_policy_snapshots"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ope_runs")),
    )
    op.create_index(op.f("ix_ope_runs_created_at"), "ope_runs", ["created_at"])
    op.create_index(op.f("ix_ope_runs_run_id"), "ope_runs", ["run_id"])
    op.create_index(op.f("ix_ope_runs_snapshot_version"), "ope_runs", ["snapshot_version"])

    op.create_index(op.f("ix_episodes_user_id_thread_id_turn"), "episodes", ["user_id", "thread_id", "turn"])
    op.create_table(
        "memory_scores",
        sa.Column("decision_id", sa.String(length=32), nullable=False),
        sa.Column("scorer", sa.String(length=200), nullable=False),
        sa.Column("p_selected", sa.Float(), nullable=False),
        sa.Column("p_all", sa.Float(), nullable=False),
        sa.Column("difference", sa.Float(), nullable=False),
        sa.Column("reward", sa.Integer(), nullable=False),
        sa.Column("answer_tokens", sa.Integer(), nullable=False),
        sa.Column("scored_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["decision_id"], ["decisions.id"], name=op.f("fk_memory_scores_decision_id_decisions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("decision_id", name=op.f("pk_memory_scores")),
    )


def downgrade() -> None:
    op.drop_table("memory_scores")
    op.drop_index(op.f("ix_episodes_user_id_thread_id_turn"), table_name="episodes")
    op.drop_index(op.f("ix_ope_runs_snapshot_version"), table_name="ope_runs")
    op.drop_index(op.f("ix_ope_runs_run_id"), table_name="ope_runs")
    op.drop_index(op.f("ix_ope_runs_created_at"), table_name="ope_runs")

    op.drop_table("ope_runs")
