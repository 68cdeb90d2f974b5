"""What the LIBERO tests need from this machine, skipped without it -- unless `make test` required it
(`VLAJAX_LIBERO_REQUIRED=1`: then a missing part fails the test instead)."""

from __future__ import annotations

import os

import pytest

from vlajax.libero import pool as pool_mod

__all__ = ["ray_or_skip", "venv_or_skip"]


def venv_or_skip() -> str:
    """The LIBERO venv's python (`make libero`); skip without it."""
    try:
        return pool_mod.libero_python()
    except pool_mod.LiberoEnvMissing as e:
        if os.environ.get("VLAJAX_LIBERO_REQUIRED"):
            raise
        pytest.skip(f"{e}")


def ray_or_skip() -> str:
    """The LIBERO venv's python, and Ray importable (`pip install -e '.[ray]'`); skip without either."""
    python = venv_or_skip()
    try:
        import ray  # noqa: F401, PLC0415 (only the Ray tests import it)
    except ImportError as e:
        if os.environ.get("VLAJAX_LIBERO_REQUIRED"):
            raise
        pytest.skip(f"{e}")
    return python
