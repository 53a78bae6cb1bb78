"""Async engine and session factory (SQLAlchemy 2 + psycopg 3)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from teamdesk.redaction import redact


def async_url(url: str) -> str:
    """`postgresql://…` → `postgresql+psycopg://…` (psycopg 3 serves both sync and async)."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    raise ValueError(f"not a PostgreSQL URL: {redact(url)!r}")  # S2


def create_engine(database_url: str, **kwargs: object) -> AsyncEngine:
    """An async engine; `pool_pre_ping` so a restarted server does not fail the first call."""
    kwargs.setdefault("pool_pre_ping", True)
    return create_async_engine(async_url(database_url), **kwargs)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions that keep attribute values after commit, so services can return rows."""
    return async_sessionmaker(engine, expire_on_commit=False)
