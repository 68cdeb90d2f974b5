"""Test set-up: 8 virtual CPU devices and the persistent compilation cache, before JAX starts."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

from vlajax.shared import compile_cache  # noqa: E402

compile_cache.enable()


def pytest_collection_modifyitems(config, items):
    """Skip multi-device tests cleanly when the backend has fewer devices than they need."""
    n = jax.device_count()
    for item in items:
        marker = item.get_closest_marker("devices")
        if marker and n < marker.args[0]:
            item.add_marker(pytest.mark.skip(reason=f"needs {marker.args[0]} devices, have {n}"))
