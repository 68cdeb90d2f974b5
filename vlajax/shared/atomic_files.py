"""Files written whole or not at all.

Every writer here puts the content in a temporary file beside the target (same directory, so the
same filesystem), flushes it to disk, and renames it over the target (`os.replace`, atomic on
POSIX): a reader, or a run restarted after a kill or a preemption, sees the previous file or the
new one, never a partial one. A leftover `<name>.tmp-<pid>` is the only trace of a write that
was interrupted.
"""

from __future__ import annotations

import json
import os
from typing import Any


def write_bytes(path: str, data: bytes) -> str:
    """`data` at `path`, atomically. -> path."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def write_text(path: str, text: str) -> str:
    """`text` (UTF-8) at `path`, atomically. -> path."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str, obj: Any) -> str:
    """`obj` as indented JSON at `path`, atomically. -> path. An object JSON cannot hold raises
    TypeError before anything is written."""
    return write_text(path, json.dumps(obj, indent=1))
