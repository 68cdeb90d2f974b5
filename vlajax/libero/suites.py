"""The LIBERO suite names a command accepts, and the one-line refusal of any other spelling."""

from __future__ import annotations

import difflib

from vlajax.libero.protocol import MAX_STEPS

__all__ = ["BASES", "PRO_AXES", "check_suite", "is_libero", "looks_like_libero"]

BASES = tuple(MAX_STEPS)  # libero_spatial, libero_object, libero_goal, libero_10, libero_90
PRO_AXES = ("swap", "lan", "object", "task", "env")  # LIBERO-PRO's variants <base>_<axis>
NAMES = BASES + tuple(f"{b}_{a}" for b in BASES for a in PRO_AXES)


def is_libero(suite: str) -> bool:
    """Whether `env.suite` names a LIBERO suite (its episodes run on LIBERO's worker processes, not on MJX)."""
    return suite.startswith("libero_")


def looks_like_libero(name: str) -> bool:
    """A name meant as a LIBERO suite, in any spelling ('LIBERO_SPATIAL', 'libro_spatial', 'libero-goal')."""
    low = name.lower().replace("-", "_")
    return low.startswith(("libero", "libro", "lbero")) or bool(difflib.get_close_matches(low, NAMES, n=1, cutoff=0.8))


def check_suite(name: str, flag: str = "--suite") -> None:
    """ValueError (one line listing the suites) unless `name` is a LIBERO suite or a LIBERO-PRO variant of one."""
    if name in NAMES:
        return
    close = difflib.get_close_matches(name.lower().replace("-", "_"), NAMES, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    raise ValueError(f"{flag} {name!r}: not a LIBERO suite ({hint}suites: {', '.join(BASES)}; LIBERO-PRO variants "
                     f"<suite>_<axis>, axes {', '.join(PRO_AXES)})")
