"""An experiment's outputs: the JSON record and, next to it, its markdown table (`<name>.md`); the machine's load
and the git checkout as a record states them."""

from __future__ import annotations

import json
import os
import subprocess


def write_results(record: dict, table: str, json_path: str) -> None:
    """Write `record` to `json_path` (creating its folder) and `table` beside it as `.md`; print the table."""
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(record, f, indent=1)
    with open(os.path.splitext(json_path)[0] + ".md", "w") as f:
        f.write(table)
    print(table, end="", flush=True)


def loadavg() -> str:
    """`/proc/loadavg` as it reads (1-, 5-, 15-minute load, running / total tasks, last pid)."""
    with open("/proc/loadavg") as f:
        return f.read().strip()


def git_state(*paths: str) -> dict:
    """The checkout a record was measured on: {'commit': HEAD's sha, 'dirty_paths': `git status --porcelain` lines
    under `paths`}; empty strings where git cannot answer (no git, not a checkout)."""
    def out(*args):
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"commit": out("rev-parse", "HEAD"), "dirty_paths": out("status", "--porcelain", "--", *paths).splitlines()}
