"""history: when each workload ended, and the indexes that keep reads and purges of a long
history to the rows they need

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06

``workloads.ended_at`` (also inside ``data``) lets the service purge ended work older than
its retention without reading every row; ``allocations.end`` lets a usage window skip the
intervals that closed before it; (user, seq) replaces the index on user, so a user's latest
work is read in order. Existing ended workloads get ``ended_at`` from ``data``.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TERMINAL = ("finished", "failed", "cancelled", "preempted", "reclaimed", "rejected")
BATCH = 5000


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("ended_at", sa.Double(), nullable=True))
    op.create_index("ix_workloads_ended_at", "workloads", ["ended_at"])
    op.create_index("ix_allocations_end", "allocations", ["end"])
    op.drop_index("ix_workloads_user", "workloads")
    op.create_index("ix_workloads_user_seq", "workloads", ["user", "seq"])
    conn = op.get_bind()
    wl = sa.table("workloads", sa.column("id", sa.String()), sa.column("seq", sa.Integer()),
                  sa.column("state", sa.String()), sa.column("submitted_at", sa.Double()),
                  sa.column("data", sa.JSON()), sa.column("ended_at", sa.Double()))
    last = -1
    while True:     # in batches by seq, so a long history is never held in memory at once
        rows = conn.execute(sa.select(wl.c.id, wl.c.seq, wl.c.submitted_at, wl.c.data)
                            .where(wl.c.state.in_(TERMINAL), wl.c.seq > last)
                            .order_by(wl.c.seq).limit(BATCH)).all()
        if not rows:
            break
        for r in rows:
            ended = (r.data or {}).get("ended_at")
            conn.execute(sa.update(wl).where(wl.c.id == r.id).values(
                ended_at=ended if isinstance(ended, (int, float)) else r.submitted_at))
        last = rows[-1].seq


def downgrade() -> None:
    op.drop_index("ix_workloads_user_seq", "workloads")
    op.create_index("ix_workloads_user", "workloads", ["user"])
    op.drop_index("ix_allocations_end", "allocations")
    op.drop_index("ix_workloads_ended_at", "workloads")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("ended_at")
