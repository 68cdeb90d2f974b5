"""Count the project's internal imports that sit inside functions (lazy) against those at module top.

    .venv/bin/python scripts/lazy_imports.py [--list] [PREFIX ...]

PREFIX filters by file path (e.g. `vlajax/serve research`). An internal import is one of `vlajax` or
`research` (absolute or relative); imports under `if TYPE_CHECKING:` are not counted. With `--list` every
lazy import is printed as `path:line  statement` with the comment line above it, if any, so a reader can
check that each one says why it is lazy.
"""

from __future__ import annotations

import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("vlajax", "research")


def _internal(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in PACKAGES for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in PACKAGES
    return False


def scan(path: str) -> tuple[list[int], list[int]]:
    """(lines of top-level internal imports, lines of internal imports inside a function) of one file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    top, lazy = [], []

    def visit(node: ast.AST, in_func: bool, in_tc: bool) -> None:
        for child in ast.iter_child_nodes(node):
            tc = in_tc or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if _internal(child) and not tc:
                (lazy if in_func else top).append(child.lineno)
            visit(child, in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)), tc)

    visit(tree, False, False)
    return top, lazy


def files(prefixes: list[str]) -> list[str]:
    out = []
    for pkg in PACKAGES:
        for d, _, names in os.walk(os.path.join(ROOT, pkg)):
            for n in sorted(names):
                rel = os.path.relpath(os.path.join(d, n), ROOT)
                if n.endswith(".py") and (not prefixes or any(rel.startswith(p.rstrip("/")) for p in prefixes)):
                    out.append(rel)
    return sorted(out)


def main(argv: list[str]) -> int:
    show = "--list" in argv
    prefixes = [a for a in argv if a != "--list"]
    n_top = n_lazy = 0
    for rel in files(prefixes):
        top, lazy = scan(os.path.join(ROOT, rel))
        n_top, n_lazy = n_top + len(top), n_lazy + len(lazy)
        if show and lazy:
            with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                lines = f.read().splitlines()
            for ln in lazy:
                above = lines[ln - 2].strip() if ln >= 2 else ""
                why = above if above.startswith("#") else ""
                print(f"{rel}:{ln}  {lines[ln - 1].strip()}  {why}")
    total = n_top + n_lazy
    pct = 100.0 * n_lazy / total if total else 0.0
    print(f"internal imports: {total}; inside functions: {n_lazy} ({pct:.0f}%); at module top: {n_top}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
