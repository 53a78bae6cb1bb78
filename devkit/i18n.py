"""The edition a learner reads: 中文 (`zh`) or English (`en`), for what the lab prints.

Notebook cells are the same code in both editions (`devkit.editions`), so the language of
the lab's own words — reveal and check feedback, board labels, scene narration — is
chosen where the kernel runs:

1. `TEAMDESK_LANG=zh|en` when set (a test, or a learner who wants it everywhere);
2. else the folder of the notebook: a kernel starts in its notebook's folder, and the
   中文 edition lives in a folder named `zh` (`notebooks/zh/`, `my-notebooks/zh/`), so
   each edition speaks its own language whichever one a learner opens;
3. else English.

`system_lang()` is the edition `teamdesk lab` opens when no `--lang` is given: the system
locale's (`zh*` → 中文, anything else → English).

Product log lines, SQL, identifiers and exception class names stay as they are.
"""

from __future__ import annotations

import locale
import os
from pathlib import Path

LANGS = ("en", "zh")


def lang() -> str:
    """The edition's language now (read each time: a test may switch it)."""
    chosen = os.environ.get("TEAMDESK_LANG", "").strip().lower()
    if chosen in LANGS:
        return chosen
    return "zh" if Path.cwd().name == "zh" else "en"


_edition = lang  # `say`'s own `lang` parameter shadows the function's name


def say(en: str, zh: str, *, lang: str | None = None) -> str:
    """`zh` in the 中文 edition, else `en` (the two written side by side at the call);
    `lang="zh"|"en"` chooses instead of the edition (a caller told which one to speak)."""
    return zh if (lang or _edition()) == "zh" else en


def system_lang() -> str:
    """`zh` when the system locale is Chinese (LC_ALL, LC_MESSAGES, LANG, then Python's
    own reading of the locale), else `en`."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(name, "")
        if value and value not in ("C", "POSIX"):
            return "zh" if value.lower().startswith("zh") else "en"
    found = locale.getlocale()[0] or ""
    return "zh" if found.lower().startswith(("zh", "chinese")) else "en"
