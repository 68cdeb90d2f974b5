"""Write `docs/config.md` (the configuration reference) from the config dataclasses, or check it.

    .venv/bin/python scripts/config_reference.py [--check]

`--check` exits 1 when the committed file is out of date (`vlajax.config.reference.render`).
"""

from __future__ import annotations

import sys

from vlajax.config.reference import DOC_PATH, render


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = DOC_PATH.read_text() if DOC_PATH.exists() else ""
        if current != text:
            print(f"{DOC_PATH} is out of date: run python scripts/config_reference.py", file=sys.stderr)
            return 1
        return 0
    DOC_PATH.write_text(text)
    print(f"wrote {DOC_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
