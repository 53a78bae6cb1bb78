"""Alembic environment: synchronous psycopg 3, URL given by `teamdesk.db.migrate`."""

from alembic import context
from sqlalchemy import create_engine, pool

from teamdesk.db.engine import async_url
from teamdesk.db.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    # psycopg 3's dialect is the same name for sync use.
    # The raw URL from `migrate.alembic_config` (a `%` in the ini option is interpolation).
    url = async_url(config.attributes.get("database_url")
                    or config.get_main_option("sqlalchemy.url"))
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
