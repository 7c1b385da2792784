"""The SQL schema of the durable store (SQLAlchemy 2 declarative tables).

Specs (queues, priority classes, nodes) are kept whole as JSON; workloads keep
the columns the store filters on next to the whole workload as JSON. The
``gpu_assignments`` primary key (node, gpu_index) is what makes a GPU held by
two workloads impossible at the database level.

A change here needs an Alembic revision in ``migrations/versions``;
``tests/scheduler/test_migrations.py`` fails while the two disagree.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Double, ForeignKey, Index, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Deterministic constraint names, so migrations can refer to them on every database.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, float: Double}


class QueueRow(Base):
    __tablename__ = "queues"
    name: Mapped[str] = mapped_column(String, primary_key=True)
    spec: Mapped[dict[str, Any]]


class PriorityClassRow(Base):
    __tablename__ = "priority_classes"
    name: Mapped[str] = mapped_column(String, primary_key=True)
    spec: Mapped[dict[str, Any]]


class NodeRow(Base):
    __tablename__ = "nodes"
    name: Mapped[str] = mapped_column(String, primary_key=True)
    spec: Mapped[dict[str, Any]]


class WorkloadRow(Base):
    __tablename__ = "workloads"
    __table_args__ = (Index("ix_workloads_user_seq", "user", "seq"),)
    id: Mapped[str] = mapped_column(String, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, unique=True, index=True)
    user: Mapped[str] = mapped_column(String)     # indexed with seq: a user's latest work, in order
    queue: Mapped[str] = mapped_column(String, index=True)
    kind: Mapped[str] = mapped_column(String)
    priority: Mapped[str] = mapped_column(String)
    state: Mapped[str] = mapped_column(String, index=True)
    submitted_at: Mapped[float]
    ended_at: Mapped[float | None] = mapped_column(index=True)    # set once it has ended
    array_id: Mapped[str | None] = mapped_column(String, index=True)  # its job array's (first task's) id
    data: Mapped[dict[str, Any]]


class GpuAssignmentRow(Base):
    """One GPU held by one workload; the primary key refuses a second holder."""

    __tablename__ = "gpu_assignments"
    node: Mapped[str] = mapped_column(String, primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    workload_id: Mapped[str] = mapped_column(
        String, ForeignKey("workloads.id", ondelete="CASCADE"), index=True)


class EventRow(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(index=True)
    kind: Mapped[str] = mapped_column(String)
    workload_id: Mapped[str | None] = mapped_column(String, index=True)
    reason: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]]


class AllocationRow(Base):
    __tablename__ = "allocations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_id: Mapped[str] = mapped_column(String, index=True)
    user: Mapped[str] = mapped_column(String)
    queue: Mapped[str] = mapped_column(String)
    flavor: Mapped[str] = mapped_column(String)
    gpus: Mapped[int] = mapped_column(Integer)
    start: Mapped[float] = mapped_column(index=True)
    end: Mapped[float | None] = mapped_column(index=True)
    array_id: Mapped[str | None] = mapped_column(String)     # the job array of the workload, if any


class FairshareRow(Base):
    """A single row (id 1): when usage was last decayed, and the usage per key."""

    __tablename__ = "fairshare"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    time: Mapped[float | None]
    usage: Mapped[dict[str, Any]]


class MetaRow(Base):
    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(Text)


metadata = Base.metadata
queues = QueueRow.__table__
priority_classes = PriorityClassRow.__table__
nodes = NodeRow.__table__
workloads = WorkloadRow.__table__
gpu_assignments = GpuAssignmentRow.__table__
events = EventRow.__table__
allocations = AllocationRow.__table__
fairshare = FairshareRow.__table__
meta = MetaRow.__table__

__all__ = ["Base", "metadata", "queues", "priority_classes", "nodes", "workloads",
           "gpu_assignments", "events", "allocations", "fairshare", "meta"]
