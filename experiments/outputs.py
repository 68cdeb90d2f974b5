"""An experiment's outputs: the JSON record and, next to it, its markdown table (`<name>.md`); the machine's load
as a record states it."""

from __future__ import annotations

import json
import os


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
