"""`pip install .` in a fresh venv: the library without the research extra (no SimPy; SciPy only as JAX's and
MJX's own dependency, never vlajax's), and its CLI runs.

Slow (it downloads and installs JAX, MuJoCo and the rest from the package index into a new venv) and needs the
index: skipped when `pip download` cannot reach it. The checkout is copied first (git's tracked files only),
so the install sees what a clone would.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESEARCH_ONLY = ("simpy",)  # scipy stays: jax, jaxlib and mujoco-mjx require it themselves


def _python312() -> str:
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "find_python.sh")], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(out.stderr.strip() or "no Python 3.12")
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_pip_install_has_no_research_dependencies(tmp_path):
    py = _python312()
    venv = tmp_path / "venv"
    subprocess.run([py, "-m", "venv", str(venv)], check=True)
    pip, vpy = str(venv / "bin" / "pip"), str(venv / "bin" / "python")
    probe = subprocess.run([pip, "download", "--no-deps", "-q", "-d", str(tmp_path / "probe"), "tyro"],
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip(f"package index unreachable: {probe.stderr.strip()[-200:]}")
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-c", "--null", "-T", "-", "-f", str(tmp_path / "src.tar")], cwd=ROOT, input=files,
                   check=True)
    src.mkdir()
    subprocess.run(["tar", "-x", "-f", str(tmp_path / "src.tar"), "-C", str(src)], check=True)

    install = subprocess.run([pip, "install", "-q", str(src)], capture_output=True, text=True, timeout=3000)
    assert install.returncode == 0, install.stderr[-2000:]
    listed = subprocess.run([pip, "list", "--format=freeze"], capture_output=True, text=True, check=True).stdout
    names = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert "vlajax" in names and "jax" in names, listed
    assert not names & set(RESEARCH_ONLY), sorted(names & set(RESEARCH_ONLY))
    if "scipy" in names:  # pulled in by JAX / MJX, not by vlajax
        show = subprocess.run([pip, "show", "scipy"], capture_output=True, text=True, check=True).stdout
        (required_by,) = [line for line in show.splitlines() if line.startswith("Required-by:")]
        assert "vlajax" not in required_by and required_by.split(":", 1)[1].strip(), required_by

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ""}
    away = str(tmp_path)  # not the checkout: the installed package, not the source tree, is imported
    imp = subprocess.run([vpy, "-c", "import vlajax; print(vlajax.__file__)"],
                         capture_output=True, text=True, cwd=away, env=env, timeout=600)
    assert imp.returncode == 0, imp.stderr[-2000:]
    assert str(venv) in imp.stdout, imp.stdout
    gone = subprocess.run([vpy, "-c", "import research"], capture_output=True, text=True, cwd=away, env=env)
    assert gone.returncode != 0  # the research code is not installed
    for args in ([], ["sft"]):
        h = subprocess.run([vpy, "-m", "vlajax.train", *args, "--help"], capture_output=True, text=True, cwd=away,
                           env=env, timeout=600)
        assert h.returncode == 0, h.stderr[-2000:]
        assert "usage: python -m vlajax.train" in h.stdout
    print(f"installed {len(names)} distributions; none of {RESEARCH_ONLY}", file=sys.stderr)
