"""job arrays: the array a workload belongs to, so one array's tasks are listed (ended ones
too) without reading every row, and the array of each ledger interval, so usage is counted by
array

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-07

``workloads.array_id`` (also inside ``data``) and ``allocations.array_id`` are the id of the
array's first task, null for work submitted alone. What was stored before holds no arrays:
nothing to fill in.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("array_id", sa.String(), nullable=True))
    op.create_index("ix_workloads_array_id", "workloads", ["array_id"])
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("array_id", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("array_id")
    op.drop_index("ix_workloads_array_id", "workloads")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("array_id")
