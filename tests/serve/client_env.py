"""The real `openpi-client` package in its own small venv (it pins numpy<2; ours is 2.x).

Made once under ~/.cache/vlajax/openpi-client-venv (`python -m venv` + `pip install
openpi-client==0.1.2`) and reused across runs; `None` (tests skip) when PyPI is unreachable.
"""

from __future__ import annotations

import os
import subprocess
import sys

OPENPI_CLIENT = "openpi-client==0.1.2"
# its websocket_client_policy imports typing_extensions, which the package does not declare
EXTRA = "typing-extensions>=4.6"
VENV = os.path.join(os.path.expanduser("~"), ".cache", "vlajax", "openpi-client-venv")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openpi_client_script.py")


def client_python() -> tuple[str | None, str]:
    """(python of the venv, "") or (None, one-line reason)."""
    py = os.path.join(VENV, "bin", "python")
    marker = os.path.join(VENV, ".vlajax-ready")
    if os.path.isfile(marker) and os.path.isfile(py):
        return py, ""
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", VENV], check=True, capture_output=True, timeout=120)
        r = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", OPENPI_CLIENT, EXTRA],
                           capture_output=True, text=True, timeout=300)
    except (subprocess.SubprocessError, OSError) as e:
        return None, f"could not make the openpi-client venv: {e}"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"pip install {OPENPI_CLIENT} failed (PyPI unreachable?): {last}"
    open(marker, "w").close()
    return py, ""
