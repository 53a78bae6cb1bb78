"""Join the caller's transaction or own one (see `teamdesk.services`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from sqlalchemy.ext.asyncio import AsyncSession


@contextlib.asynccontextmanager
async def transaction(session: AsyncSession) -> AsyncIterator[AsyncSession]:
    if session.in_transaction():
        yield session
        await session.flush()
        return
    async with session.begin():
        yield session
