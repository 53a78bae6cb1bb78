"""The embedded PostgreSQL and Redis of the dev environment, and their bookkeeping.

One module per concern: `paths` (the data folder and its secret files, S1), `owners`
(who keeps the servers alive), `processes` (is this pid our server? S3), `postgres`,
`redis` (the binary and the one launcher), `watchdog` (no orphans), and `api` (what the
rest of the project calls). The names below are that public surface:

    from devkit import services
    settings = services.resolve_settings()      # URLs from the environment, or embedded
"""

from __future__ import annotations

from devkit.services.api import (
    ServiceUrls,
    ensure_services,
    resolve_settings,
    status,
    stop_services,
)
from devkit.services.owners import live_owners, registered_owner, release_owner
from devkit.services.paths import (
    ServiceError,
    check_data_dir,
    data_dir,
    make_private_dir,
    write_private,
)
from devkit.services.postgres import restart_postgres
from devkit.services.processes import is_server
from devkit.services.redis import (
    REDIS_SERVER_NAMES,
    redis_command,
    redis_server,
    redis_url_for,
    spawn_redis,
    start_redis,
    stop_redis,
)

__all__ = [
    "REDIS_SERVER_NAMES",
    "ServiceError",
    "ServiceUrls",
    "check_data_dir",
    "data_dir",
    "ensure_services",
    "is_server",
    "live_owners",
    "make_private_dir",
    "redis_command",
    "redis_server",
    "redis_url_for",
    "registered_owner",
    "release_owner",
    "resolve_settings",
    "restart_postgres",
    "spawn_redis",
    "start_redis",
    "status",
    "stop_redis",
    "stop_services",
    "write_private",
]
