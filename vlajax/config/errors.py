"""The configuration's error type and its one checking helper (the base of `vlajax.config.schema`).

`check(cond, msg)` raises `ConfigError(msg)` (one line that says what to change); inside
`parse_errors()` (a CLI parser building a config) it raises an exception parsers do not catch,
turned back into a `ConfigError` on the way out.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator


class ConfigError(ValueError):
    """A configuration that cannot run. The message is one line that says what to change."""


class _ParseConfigError(Exception):
    """A ConfigError raised while a CLI parser builds the config (not a ValueError, which parsers
    catch and render as a multi-line box): `parse_errors()` turns it back into a ConfigError."""


_PARSING = contextvars.ContextVar("vlajax_config_parsing", default=False)


def check(cond: bool, msg: str) -> None:
    """Raise `ConfigError(msg)` (a parse-time error inside `parse_errors()`) unless `cond`."""
    if not cond:
        raise (_ParseConfigError if _PARSING.get() else ConfigError)(msg)


@contextlib.contextmanager
def parse_errors() -> Iterator[None]:
    """Around a CLI parser (tyro) building a `TrainConfig`: a contradiction leaves as one ConfigError."""
    token = _PARSING.set(True)
    try:
        yield
    except _ParseConfigError as e:
        raise ConfigError(str(e)) from None
    finally:
        _PARSING.reset(token)
