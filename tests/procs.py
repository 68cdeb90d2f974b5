"""Processes as /proc tells them (Linux): the tests that check no worker outlives its run read them here."""

from __future__ import annotations


def process_stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, session id, state) of a live process; None when it is gone or a zombie (it awaits a reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the command name in () may hold spaces
    except OSError:
        return None
    return None if fields[0] in "ZX" else (int(fields[1]), int(fields[3]), fields[0])
