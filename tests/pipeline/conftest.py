"""Every pipeline test must leave no lane thread running (no leaked or hung lanes)."""

import threading
import time

import pytest


@pytest.fixture(autouse=True)
def no_leaked_lanes():
    yield
    deadline = time.monotonic() + 5.0
    while True:
        alive = [t.name for t in threading.enumerate() if t.name.startswith("lane:") and t.is_alive()]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not alive, f"lane threads still running after the test: {alive}"
