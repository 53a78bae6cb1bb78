"""`python -m devkit.services watch ROOT`: the detached watchdog of one data folder."""

from __future__ import annotations

import sys
from pathlib import Path

from devkit.services.watchdog import watch

if __name__ == "__main__":  # pragma: no cover - the detached watchdog
    if len(sys.argv) == 3 and sys.argv[1] == "watch":
        watch(Path(sys.argv[2]))
    else:
        sys.exit("usage: python -m devkit.services watch DATA_DIR")
