"""initial schema: teams, members, tickets, history, notifications, the task ledger.

`background_tasks.updated_at` is kept by a trigger so that every UPDATE advances it,
including bulk lease-conditioned ones (D6 depends on it). An UPDATE that sets
`updated_at` itself keeps its value: that is how tests compress the recovery clock.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 12:31:27.088172
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Task ids: short, readable and unique by construction. A sequence number is mapped by
    # an affine bijection modulo 30^width (multiplier coprime with 30) onto a base-30
    # alphabet without look-alike characters: T7KQ2M, then one more character after 24.3M.
    op.execute("CREATE SEQUENCE background_task_seq")
    op.execute("""
        CREATE FUNCTION teamdesk_next_task_id() RETURNS text AS $$
        DECLARE
            n bigint := nextval('background_task_seq');
            alphabet text := '23456789ABCDEFGHJKMNPQRSTVWXYZ';
            width int := 5;
            space bigint := 24300000;
            x bigint;
            id text := '';
        BEGIN
            WHILE n >= space LOOP
                width := width + 1;
                space := space * 30;
            END LOOP;
            x := (n * 15485863 + 4212773) % space;
            FOR i IN 1..width LOOP
                id := substr(alphabet, (x % 30)::int + 1, 1) || id;
                x := x / 30;
            END LOOP;
            RETURN 'T' || id;
        END
        $$ LANGUAGE plpgsql
    """)
    op.create_table('teams',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('members',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('team_id', sa.String(length=40), nullable=False),
    sa.Column('user_id', sa.String(length=40), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('role', sa.Enum('admin', 'agent', 'customer', name='member_role'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['team_id'], ['teams.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('team_id', 'user_id', name='uq_members_team_user')
    )
    op.create_table('tickets',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('team_id', sa.String(length=40), nullable=False),
    sa.Column('title', sa.String(length=200), nullable=False),
    sa.Column('status', sa.Enum('OPEN', 'PENDING', 'CLOSED', name='ticket_status'), server_default='OPEN', nullable=False),
    sa.Column('priority', sa.Enum('LOW', 'NORMAL', 'HIGH', 'URGENT', name='ticket_priority'), server_default='NORMAL', nullable=False),
    sa.Column('creator_id', sa.String(length=40), nullable=False),
    sa.Column('assignee_id', sa.String(length=40), nullable=True),
    sa.Column('due_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('version', sa.Integer(), server_default='1', nullable=False),
    sa.Column('reminder_revision', sa.Integer(), server_default='0', nullable=False),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['team_id'], ['teams.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_tickets_team_created', 'tickets', ['team_id', 'created_at'], unique=False)
    op.create_table('background_tasks',
    sa.Column('id', sa.String(length=16), server_default=sa.text('teamdesk_next_task_id()'), nullable=False),
    sa.Column('type', sa.Enum('EXPORT', 'REMINDER', name='task_type'), nullable=False),
    sa.Column('status', sa.Enum('WAITING', 'RUNNING', 'COMPLETED', 'FAILED', name='task_status'), server_default='WAITING', nullable=False),
    sa.Column('run', sa.Integer(), server_default='0', nullable=False),
    sa.Column('attempts', sa.Integer(), server_default='0', nullable=False),
    sa.Column('progress', sa.Integer(), server_default='0', nullable=False),
    sa.Column('execution_id', sa.String(length=36), nullable=True),
    sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('run_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('owner_id', sa.String(length=40), nullable=False),
    sa.Column('team_id', sa.String(length=40), nullable=False),
    sa.Column('ticket_id', sa.Integer(), nullable=True),
    sa.Column('reminder_revision', sa.Integer(), nullable=True),
    sa.Column('scope', sa.Enum('TEAM', 'OWN', name='task_scope'), server_default='OWN', nullable=False),
    sa.Column('filters', postgresql.JSONB(astext_type=sa.Text()), server_default='{}', nullable=False),
    sa.Column('result_csv', sa.Text(), nullable=True),
    sa.Column('result_summary', sa.Text(), nullable=True),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['team_id'], ['teams.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['ticket_id'], ['tickets.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_background_tasks_dispatch', 'background_tasks', [sa.literal_column('dispatched_at ASC NULLS FIRST'), 'run_at'], unique=False, postgresql_where=sa.text("status = 'WAITING'"))
    op.create_index('ix_background_tasks_expiry', 'background_tasks', ['expires_at'], unique=False, postgresql_where=sa.text("type = 'EXPORT' AND result_csv IS NOT NULL"))
    op.create_index('ix_background_tasks_stale_running', 'background_tasks', ['updated_at'], unique=False, postgresql_where=sa.text("status = 'RUNNING'"))
    op.create_index('ix_background_tasks_team_created', 'background_tasks', ['team_id', 'created_at'], unique=False)
    op.create_index('ix_background_tasks_ticket', 'background_tasks', ['ticket_id'], unique=False, postgresql_where=sa.text('ticket_id IS NOT NULL'))
    op.create_table('notifications',
    sa.Column('id', sa.BigInteger(), nullable=False),
    sa.Column('ticket_id', sa.Integer(), nullable=False),
    sa.Column('team_id', sa.String(length=40), nullable=False),
    sa.Column('reminder_revision', sa.Integer(), nullable=False),
    sa.Column('recipient_id', sa.String(length=40), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['ticket_id'], ['tickets.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('ticket_id', 'reminder_revision', 'recipient_id', name='uq_notifications_ticket_revision_recipient')
    )
    op.create_table('ticket_events',
    sa.Column('id', sa.BigInteger(), nullable=False),
    sa.Column('ticket_id', sa.Integer(), nullable=False),
    sa.Column('team_id', sa.String(length=40), nullable=False),
    sa.Column('kind', sa.String(length=40), nullable=False),
    sa.Column('actor_id', sa.String(length=40), nullable=True),
    sa.Column('data', postgresql.JSONB(astext_type=sa.Text()), server_default='{}', nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['ticket_id'], ['tickets.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_ticket_events_ticket', 'ticket_events', ['ticket_id', 'id'], unique=False)
    op.execute("""
        CREATE FUNCTION teamdesk_touch_updated_at() RETURNS trigger AS $$
        BEGIN
            IF NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
                NEW.updated_at := clock_timestamp();
            END IF;
            RETURN NEW;
        END
        $$ LANGUAGE plpgsql
    """)
    for table in ("background_tasks", "tickets"):
        op.execute(f"""
            CREATE TRIGGER {table}_touch_updated_at
            BEFORE UPDATE ON {table}
            FOR EACH ROW EXECUTE FUNCTION teamdesk_touch_updated_at()
        """)


def downgrade() -> None:
    op.drop_index('ix_ticket_events_ticket', table_name='ticket_events')
    op.drop_table('ticket_events')
    op.drop_table('notifications')
    op.drop_index('ix_background_tasks_ticket', table_name='background_tasks', postgresql_where=sa.text('ticket_id IS NOT NULL'))
    op.drop_index('ix_background_tasks_team_created', table_name='background_tasks')
    op.drop_index('ix_background_tasks_stale_running', table_name='background_tasks', postgresql_where=sa.text("status = 'RUNNING'"))
    op.drop_index('ix_background_tasks_expiry', table_name='background_tasks', postgresql_where=sa.text("type = 'EXPORT' AND result_csv IS NOT NULL"))
    op.drop_index('ix_background_tasks_dispatch', table_name='background_tasks', postgresql_where=sa.text("status = 'WAITING'"))
    op.drop_table('background_tasks')
    op.drop_index('ix_tickets_team_created', table_name='tickets')
    op.drop_table('tickets')
    op.drop_table('members')
    op.drop_table('teams')
    op.execute("DROP FUNCTION IF EXISTS teamdesk_touch_updated_at()")
    op.execute("DROP FUNCTION IF EXISTS teamdesk_next_task_id()")
    op.execute("DROP SEQUENCE IF EXISTS background_task_seq")
    for name in ("task_scope", "task_status", "task_type", "ticket_priority", "ticket_status",
                 "member_role"):
        op.execute(f"DROP TYPE IF EXISTS {name}")
