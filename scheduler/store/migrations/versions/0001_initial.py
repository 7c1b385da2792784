"""initial schema

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _spec_table(name: str) -> None:
    op.create_table(
        name,
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=f"pk_{name}"),
    )


def upgrade() -> None:
    for name in ("queues", "priority_classes", "nodes"):
        _spec_table(name)

    op.create_table(
        "workloads",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("queue", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("priority", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("submitted_at", sa.Double(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_workloads"),
    )
    op.create_index("ix_workloads_seq", "workloads", ["seq"], unique=True)
    op.create_index("ix_workloads_user", "workloads", ["user"])
    op.create_index("ix_workloads_queue", "workloads", ["queue"])
    op.create_index("ix_workloads_state", "workloads", ["state"])

    op.create_table(
        "gpu_assignments",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("workload_id", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"], ondelete="CASCADE",
                                name="fk_gpu_assignments_workload_id_workloads"),
        sa.PrimaryKeyConstraint("node", "gpu_index", name="pk_gpu_assignments"),
    )
    op.create_index("ix_gpu_assignments_workload_id", "gpu_assignments", ["workload_id"])

    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("workload_id", sa.String(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
    )
    op.create_index("ix_events_time", "events", ["time"])
    op.create_index("ix_events_workload_id", "events", ["workload_id"])

    op.create_table(
        "allocations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("workload_id", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("queue", sa.String(), nullable=False),
        sa.Column("flavor", sa.String(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("start", sa.Double(), nullable=False),
        sa.Column("end", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_allocations"),
    )
    op.create_index("ix_allocations_start", "allocations", ["start"])
    op.create_index("ix_allocations_workload_id", "allocations", ["workload_id"])

    op.create_table(
        "fairshare",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("time", sa.Double(), nullable=True),
        sa.Column("usage", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_fairshare"),
    )

    op.create_table(
        "meta",
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_meta"),
    )


def downgrade() -> None:
    for name in ("meta", "fairshare", "allocations", "events", "gpu_assignments",
                 "workloads", "nodes", "priority_classes", "queues"):
        op.drop_table(name)
