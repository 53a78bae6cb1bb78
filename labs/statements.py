"""The harness's SQL statements, by name (`labs/queries.sql`), loaded by the product's own
`load_queries`: the book's old writes and the counterfactuals sit in the same form as the
statements the product runs (`teamdesk.tasks.ledger.QUERIES`), for a learner to compare.

    await run(session, "status_counts")             # on a lab session's connection
    await conn.execute(LAB_QUERIES["legacy_failed"], values)   # on a psycopg connection
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from teamdesk.tasks.ledger import load_queries

#: name → SQL text of every statement of the harness.
LAB_QUERIES: dict[str, str] = load_queries(Path(__file__).with_name("queries.sql"))


async def run(session: AsyncSession, name: str, params: Mapping[str, Any] | None = None
              ) -> Any:
    """Statement `name` on the session's connection, its `%(x)s` parameters handed to
    psycopg as they are (SQLAlchemy's `exec_driver_sql`); returns the result."""
    conn = await session.connection()
    return await conn.exec_driver_sql(LAB_QUERIES[name], dict(params or {}))
