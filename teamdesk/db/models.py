"""SQLAlchemy 2 models: the help desk's business tables and the task ledger.

`background_tasks` is the ledger *and* the outbox (contract I1, O2): a row is written in
the same transaction as the business fact that causes it (O1), and the dispatcher scans
it (D1). `updated_at` is maintained by a database trigger (see the initial migration) so
that every UPDATE, including the bulk lease-conditioned ones, advances it; stale recovery
(D6) depends on that.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Enum,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Role(enum.StrEnum):
    """A member's role in one team. Admins and agents are *staff*."""

    #: Manages the team; sees every ticket and task of the team.
    ADMIN = "admin"
    #: Works tickets; sees every ticket and task of the team.
    AGENT = "agent"
    #: Files tickets; sees only the tickets and tasks they own.
    CUSTOMER = "customer"

    @property
    def is_staff(self) -> bool:
        return self in (Role.ADMIN, Role.AGENT)


class TicketStatus(enum.StrEnum):
    #: New or being worked.
    OPEN = "OPEN"
    #: Waiting on the customer.
    PENDING = "PENDING"
    #: Done; its reminders no longer apply (M1).
    CLOSED = "CLOSED"


class Priority(enum.StrEnum):
    LOW = "LOW"
    NORMAL = "NORMAL"
    HIGH = "HIGH"
    URGENT = "URGENT"


class TaskType(enum.StrEnum):
    #: A CSV export of tickets matching filters (ch. 25, X1).
    EXPORT = "EXPORT"
    #: A due-date reminder for one ticket revision (ch. 24, O3, P10).
    REMINDER = "REMINDER"


class TaskStatus(enum.StrEnum):
    """The ledger's state of a task; the queue has its own (see `tasks.queue`)."""

    #: Intent recorded, not yet claimed by an executor; the dispatcher scans these (D1).
    WAITING = "WAITING"
    #: Claimed: an executor holds the lease {id, run, execution_id} (P2, P3).
    RUNNING = "RUNNING"
    #: The business result is committed (P5, P10). Never turned back by the dispatcher.
    COMPLETED = "COMPLETED"
    #: Terminal failure of this run; a manual retry opens run+1 (R2).
    FAILED = "FAILED"


class Scope(enum.StrEnum):
    #: Every ticket of the team (staff only).
    TEAM = "TEAM"
    #: Only the tickets the task's owner created.
    OWN = "OWN"


def _enum(e: type[enum.Enum], name: str) -> Enum:
    return Enum(e, name=name, values_callable=lambda x: [m.value for m in x],
                validate_strings=True)


class Team(Base):
    __tablename__ = "teams"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Member(Base):
    __tablename__ = "members"
    __table_args__ = (UniqueConstraint("team_id", "user_id", name="uq_members_team_user"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    user_id: Mapped[str] = mapped_column(String(40))
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[Role] = mapped_column(_enum(Role, "member_role"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Ticket(Base):
    __tablename__ = "tickets"
    __table_args__ = (Index("ix_tickets_team_created", "team_id", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(String(200))
    status: Mapped[TicketStatus] = mapped_column(
        _enum(TicketStatus, "ticket_status"), default=TicketStatus.OPEN, server_default="OPEN")
    priority: Mapped[Priority] = mapped_column(_enum(Priority, "ticket_priority"),
                                               default=Priority.NORMAL, server_default="NORMAL")
    creator_id: Mapped[str] = mapped_column(String(40))
    assignee_id: Mapped[str | None] = mapped_column(String(40))
    due_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: Bumped by every business change, including a delivered reminder (P10).
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    #: Bumped by `invalidate_reminders` so older REMINDER tasks become no-ops (O3, M1).
    reminder_revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class TicketEvent(Base):
    """The history of a ticket: what people did and what the system did."""

    __tablename__ = "ticket_events"
    __table_args__ = (Index("ix_ticket_events_ticket", "ticket_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    ticket_id: Mapped[int] = mapped_column(ForeignKey("tickets.id", ondelete="CASCADE"))
    team_id: Mapped[str] = mapped_column(String(40))
    #: e.g. `created`, `due_changed`, `closed`, `reminder_sent`.
    kind: Mapped[str] = mapped_column(String(40))
    #: None for a system event.
    actor_id: Mapped[str | None] = mapped_column(String(40))
    data: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict, server_default="{}")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Notification(Base):
    __tablename__ = "notifications"
    __table_args__ = (
        UniqueConstraint("ticket_id", "reminder_revision", "recipient_id",
                         name="uq_notifications_ticket_revision_recipient"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    ticket_id: Mapped[int] = mapped_column(ForeignKey("tickets.id", ondelete="CASCADE"))
    team_id: Mapped[str] = mapped_column(String(40))
    reminder_revision: Mapped[int] = mapped_column(Integer)
    recipient_id: Mapped[str] = mapped_column(String(40))
    message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class BackgroundTask(Base):
    """One background task: the ledger row and the outbox entry (I1, O2)."""

    __tablename__ = "background_tasks"
    __table_args__ = (
        # D1: WAITING rows, oldest check first, NULL (never dispatched) first.
        Index("ix_background_tasks_dispatch", text("dispatched_at ASC NULLS FIRST"), "run_at",
              postgresql_where=text("status = 'WAITING'")),
        # D1, first half of the scan: WAITING rows never dispatched, by run_at (0002).
        Index("ix_background_tasks_undispatched", "run_at",
              postgresql_where=text("status = 'WAITING' AND dispatched_at IS NULL")),
        # D6: RUNNING rows by how long since they last moved.
        Index("ix_background_tasks_stale_running", "updated_at",
              postgresql_where=text("status = 'RUNNING'")),
        # D7: exports still holding a CSV, by expiry.
        Index("ix_background_tasks_expiry", "expires_at",
              postgresql_where=text("type = 'EXPORT' AND result_csv IS NOT NULL")),
        Index("ix_background_tasks_team_created", "team_id", "created_at"),
        Index("ix_background_tasks_ticket", "ticket_id",
              postgresql_where=text("ticket_id IS NOT NULL")),
    )

    #: Short and readable, e.g. `T7KQ2M`, so job ids read `T7KQ2M-0` (I2); made by the
    #: database from a sequence, hence unique by construction (see the initial migration).
    id: Mapped[str] = mapped_column(String(16), primary_key=True,
                                    server_default=text("teamdesk_next_task_id()"))
    type: Mapped[TaskType] = mapped_column(_enum(TaskType, "task_type"))
    status: Mapped[TaskStatus] = mapped_column(_enum(TaskStatus, "task_status"),
                                               default=TaskStatus.WAITING,
                                               server_default="WAITING")
    #: Round number, from 0; the UI shows run+1 (I1). A manual retry bumps it (R2).
    run: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: attemptsMade+1 of the current queue execution; not a lifetime count (I3).
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    progress: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: The lease's third part; NULL when nobody holds it (P2, P3).
    execution_id: Mapped[str | None] = mapped_column(String(36))
    #: Last successful enqueue check; not "sent" and not "done" (D1, D3).
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    run_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_error: Mapped[str | None] = mapped_column(Text)
    owner_id: Mapped[str] = mapped_column(String(40))
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    ticket_id: Mapped[int | None] = mapped_column(ForeignKey("tickets.id", ondelete="SET NULL"))
    reminder_revision: Mapped[int | None] = mapped_column(Integer)
    scope: Mapped[Scope] = mapped_column(_enum(Scope, "task_scope"), default=Scope.OWN,
                                         server_default="OWN")
    filters: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict, server_default="{}")
    result_csv: Mapped[str | None] = mapped_column(Text)
    result_summary: Mapped[str | None] = mapped_column(Text)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: How many times D6 recovered this run; the third stale finding fails it (D9). A
    #: manual retry starts the count again (R2).
    stale_recoveries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
