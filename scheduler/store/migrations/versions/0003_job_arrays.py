"""job arrays: the array a workload belongs to, so one array's tasks are listed (ended ones
too) without reading every row

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-07

``workloads.array_id`` (also inside ``data``) is the id of the array's first task, null for
work submitted alone. Work stored before holds no arrays: nothing to fill in.
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


def downgrade() -> None:
    op.drop_index("ix_workloads_array_id", "workloads")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("array_id")
