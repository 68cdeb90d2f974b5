"""Every experiments/ entry point speaks the tools' CLI convention (`vlajax.shared.cli`: a frozen dataclass read by
tyro): `--help` exits 0 with tyro's usage line, and no script goes back to argparse."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[2] / "experiments"


def _entry_points() -> list[str]:
    """Scripts with an `if __name__ == "__main__":` block."""
    out = []
    for path in sorted(EXPERIMENTS.glob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body):
            out.append(path.name)
    return out


def test_there_are_entry_points_and_none_imports_argparse():
    names = _entry_points()
    assert {"object_suite_binding.py", "object_suite_probes.py", "object_suite_target_probe.py"} <= set(names)
    for path in EXPERIMENTS.glob("*.py"):
        imported = {a.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)}
        assert "argparse" not in imported, f"{path.name} imports argparse; use vlajax.shared.cli.parse (tyro)"


@pytest.mark.parametrize("script", _entry_points())
def test_help_is_tyros(script):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    p = subprocess.run([sys.executable, str(EXPERIMENTS / script), "--help"], capture_output=True, text=True,
                       timeout=120, env=env, cwd=EXPERIMENTS.parent)
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    assert p.stdout.startswith("usage: ") and "╭─ options" in p.stdout, p.stdout[:500]  # tyro's panels
