"""outbox notify: a new outbox row wakes the dispatcher (D8, O1).

`background_tasks_outbox_notify`, a statement-level AFTER INSERT trigger, sends
`NOTIFY teamdesk_outbox` (no payload). PostgreSQL delivers it only when the inserting
transaction commits (O1: the task row and the business fact commit together, and so does
the wake-up; a rolled-back request wakes nobody), and folds the notifications of one
transaction into one. A worker process's dispatch loop listens and starts a tick at once,
instead of leaving a new task waiting up to a whole tick interval; the timer stays the
safety net (a notification is lost while no one listens: the next tick finds the row, D1).
Creating a task still never calls Redis (O4). One statement-level trigger per INSERT
statement, so a bulk insert costs one notification, not one per row.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 12:00:00
"""
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE FUNCTION teamdesk_outbox_notify() RETURNS trigger AS $$
        BEGIN
            PERFORM pg_notify('teamdesk_outbox', '');
            RETURN NULL;
        END
        $$ LANGUAGE plpgsql
    """)
    op.execute("""
        CREATE TRIGGER background_tasks_outbox_notify
        AFTER INSERT ON background_tasks
        FOR EACH STATEMENT EXECUTE FUNCTION teamdesk_outbox_notify()
    """)


def downgrade() -> None:
    op.execute("DROP TRIGGER background_tasks_outbox_notify ON background_tasks")
    op.execute("DROP FUNCTION teamdesk_outbox_notify()")
