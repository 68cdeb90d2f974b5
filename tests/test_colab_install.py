"""The notebooks' install cell (colabs/*.ipynb, cell 2) works unedited: where vlajax is not installed it
installs the checkout the notebook runs in (or `./vlajax` after a `git clone`), or `VLAJAX_SOURCE` (a pip
requirement or a wheel), or else the published repository `VLAJAX_REPO` (one constant in the cell; the
environment variable of that name overrides it). The default-suite tests record `subprocess.check_call` with
`find_spec('vlajax')` answering None (no network here); the `slow` one runs the cell for real as a user
outside a checkout would: a fresh venv without vlajax, the cell pointed at this clone (`VLAJAX_REPO=file://...`),
then the whole quickstart notebook in a kernel of that venv."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

import nbformat
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
PUBLISHED = "https://github.com/vlajax/vlajax"  # the repository the notebooks install from
CELLS = {p.name: nbformat.read(p, as_version=4).cells[1].source for p in sorted((REPO / "colabs").glob("*.ipynb"))}


def test_every_notebook_has_the_same_install_cell_and_no_placeholder():
    assert len(CELLS) >= 6 and len(set(CELLS.values())) == 1
    cell = next(iter(CELLS.values()))
    assert "<owner>" not in cell.lower() and "<repository" not in cell and 'VLAJAX_SOURCE = ""' in cell
    assert re.findall(r'^VLAJAX_REPO = "(https://[^"]+)"$', cell, re.M) == [PUBLISHED]  # one constant


def _run_cell(monkeypatch, cwd, env_source: str | None = None, env_repo: str | None = None) -> list[list[str]]:
    calls: list[list[str]] = []
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vlajax" else find_spec(name, *a))
    monkeypatch.setattr(subprocess, "check_call", lambda cmd, *a, **k: calls.append(list(cmd)) or 0)
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name, value in (("VLAJAX_SOURCE", env_source), ("VLAJAX_REPO", env_repo)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
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


def test_outside_a_checkout_it_installs_the_published_repository(monkeypatch, tmp_path):
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    assert _run_cell(monkeypatch, tmp_path) == [[*pip, f"vlajax[report] @ git+{PUBLISHED}"]]
    fork = "https://example.org/fork/vlajax"
    assert _run_cell(monkeypatch, tmp_path, env_repo=fork) == [[*pip, f"vlajax[report] @ git+{fork}"]]
    wheel = str(tmp_path / "vlajax-0.1.0-py3-none-any.whl[report]")
    assert _run_cell(monkeypatch, tmp_path, env_source=wheel) == [[*pip, wheel]]


def _fresh_venv(root: pathlib.Path) -> pathlib.Path:
    """A venv without vlajax whose other packages come from this interpreter's environment (no network here):
    a `.pth` line appends its site-packages, whose own `.pth` files -- the editable vlajax -- are not run."""
    subprocess.check_call([sys.executable, "-m", "venv", "--without-pip", str(root)])
    python = root / "bin" / "python"
    purelib = subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                      text=True).strip()
    deps = sysconfig.get_paths()["purelib"]
    pathlib.Path(purelib, "deps_of_the_test_env.pth").write_text(deps + "\n")
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('vlajax'))"],
                           capture_output=True, text=True, cwd=root, env=_user_env())
    assert probe.stdout.strip() == "None", probe.stdout + probe.stderr  # vlajax is not there yet
    return python


def _user_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VLAJAX_SOURCE", "VIRTUAL_ENV")}
    # pip without an index: the dependencies are already importable, vlajax itself is built from the clone
    env.update(PIP_NO_INDEX="1", PIP_NO_DEPS="1", PIP_NO_BUILD_ISOLATION="0", VLAJAX_REPO=REPO.as_uri(),
               JAX_PLATFORMS="cpu")
    return env


@pytest.mark.slow  # ~30 s to clone and build vlajax, then the quickstart notebook (2-3 min on 2 cores)
@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs this checkout's git history (VLAJAX_REPO=file://)")
def test_quickstart_runs_in_a_fresh_venv_outside_the_checkout(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    python = _fresh_venv(tmp_path / "venv")
    kernels = tmp_path / "jupyter" / "kernels" / "fresh"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({"argv": [str(python), "-m", "ipykernel_launcher", "-f",
                                                              "{connection_file}"],
                                                     "display_name": "fresh venv", "language": "python"}))
    work = tmp_path / "work"  # the notebook's directory: no checkout here or above
    work.mkdir()
    for k in list(os.environ):
        if k not in _user_env():
            monkeypatch.delenv(k)
    for k, v in _user_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    nb = nbformat.read(REPO / "colabs" / "01_quickstart.ipynb", as_version=4)  # every cell as committed
    NotebookClient(nb, timeout=900, kernel_name="fresh", resources={"metadata": {"path": str(work)}}).execute()
    out = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert out.strip().startswith("vlajax "), out
    where = subprocess.run([str(python), "-c", "import vlajax; print(vlajax.__file__)"], capture_output=True,
                           text=True, cwd=work, env=_user_env())
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout + where.stderr  # installed, not the clone
