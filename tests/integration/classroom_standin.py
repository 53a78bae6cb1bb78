"""STAND-IN for `devkit.classroom.provision`, for tests/integration/test_hub.py only, until
the real provisioning is in this branch. Delete this file, and the line of test_hub.py's
hub overrides that installs it (`PROVISION_OVERRIDE`), when `devkit.classroom` exists.

Same call, same answer's shape: `provision(admin_database_url, admin_redis_url, names)`
returns one learner per name whose `environment()` holds DATABASE_URL, REDIS_URL and
TEAMDESK_QUEUE_PREFIX. What it does not do is the point of the real one: it creates no
role, no database and no Redis user; every learner gets the administrator's URLs (the
suite's own servers) and a queue prefix with their name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StandInLearner:
    name: str
    database_url: str
    redis_url: str

    def environment(self) -> dict[str, str]:
        return {"DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url,
                "TEAMDESK_QUEUE_PREFIX": f"td:{self.name}"}


def provision(admin_database_url: str, admin_redis_url: str,
              names: Sequence[str]) -> list[StandInLearner]:
    return [StandInLearner(n, admin_database_url, admin_redis_url) for n in names]
