"""The notebooks' install cell (colabs/*.ipynb, cell 2) works unedited: where vlajax is not installed it
installs the checkout the notebook runs in (or `./vlajax` after a `git clone`), or `VLAJAX_SOURCE`; it
raises only where there is neither, with a line that says what to do. pip itself is not run here (no
network in the test machines): `subprocess.check_call` is recorded, `find_spec('vlajax')` answers None."""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
import subprocess
import sys

import nbformat
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
CELLS = {p.name: nbformat.read(p, as_version=4).cells[1].source for p in sorted((REPO / "colabs").glob("*.ipynb"))}


def test_every_notebook_has_the_same_install_cell_and_no_placeholder():
    assert len(CELLS) >= 6 and len(set(CELLS.values())) == 1
    cell = next(iter(CELLS.values()))
    assert "OWNER" not in cell and 'VLAJAX_SOURCE = ""' in cell


def _run_cell(monkeypatch, cwd, env_source: str | None = None) -> list[list[str]]:
    calls: list[list[str]] = []
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vlajax" else find_spec(name, *a))
    monkeypatch.setattr(subprocess, "check_call", lambda cmd, *a, **k: calls.append(list(cmd)) or 0)
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    if env_source is None:
        monkeypatch.delenv("VLAJAX_SOURCE", raising=False)
    else:
        monkeypatch.setenv("VLAJAX_SOURCE", env_source)
    exec(compile(next(iter(CELLS.values())), "install-cell", "exec"), {"__name__": "__main__"})
    return calls


def test_installs_from_the_checkout_it_runs_in(monkeypatch):
    calls = _run_cell(monkeypatch, REPO / "colabs")  # Jupyter's cwd: the notebook's directory
    assert calls == [[sys.executable, "-m", "pip", "install", "-q", "-e", f"{REPO}[report]"]]
    assert sys.path[0] == str(REPO)


def test_installs_a_clone_next_to_it_and_honours_vlajax_source(monkeypatch, tmp_path):
    (tmp_path / "vlajax").mkdir()
    shutil.copy(REPO / "pyproject.toml", tmp_path / "vlajax" / "pyproject.toml")  # `!git clone ...` on Colab
    assert _run_cell(monkeypatch, tmp_path)[0][-2:] == ["-e", f"{tmp_path / 'vlajax'}[report]"]
    req = "vlajax[report] @ git+https://example.org/vlajax"
    assert _run_cell(monkeypatch, tmp_path, req)[0][-1] == req


def test_without_a_checkout_or_a_source_it_says_what_to_do(monkeypatch, tmp_path):
    with pytest.raises(RuntimeError, match="git clone"):
        _run_cell(monkeypatch, tmp_path)
