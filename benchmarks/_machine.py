"""What a figure was measured on, written into every benchmark's JSON (`--json`), so the
generated `docs/measurements.md` can say it beside the figure."""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import psycopg
import redis

from teamdesk.config import Settings


def machine_info(settings: Settings) -> dict[str, Any]:
    """Date, machine, Python, the two servers' versions and the libraries that matter."""
    with psycopg.connect(settings.database_url or "", autocommit=True) as conn:
        # Reported by the server when the connection starts: no statement needed.
        postgres = str(conn.info.parameter_status("server_version"))
    client = redis.Redis.from_url(settings.redis_url or "")
    try:
        info = client.info("server")
    finally:
        client.close()
    server = (f"Valkey {info['valkey_version']}" if "valkey_version" in info
              else f"Redis {info['redis_version']}")
    return {"measured_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(),
            "servers": f"PostgreSQL {postgres.split()[0]}, {server}",
            "libraries": {name: metadata.version(name)
                          for name in ("bullmq", "redis", "psycopg", "sqlalchemy")},
            "argv": sys.argv[1:]}
