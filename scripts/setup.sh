#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment with Python 3.12 and installs
# vlajax in editable mode with its dev tools and the quickstart's report extra. Idempotent:
# re-running only reinstalls when pyproject.toml changed (the Makefile's stamp file decides).
# `ray` too: the LIBERO worker pool's Ray backend, which the default test suite runs on a local cluster.
set -euo pipefail
venv="${1:-.venv}"
here="$(cd "$(dirname "$0")/.." && pwd)"
py="$(bash "$here/scripts/find_python.sh")"
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating $venv with $py"
  "$py" -m venv "$venv"
fi
echo "[setup] installing vlajax[dev,report,ray] into $venv (first time takes a few minutes)"
"$venv/bin/python" -m pip install --quiet --upgrade pip
log="$(mktemp)"
if ! "$venv/bin/python" -m pip install --quiet -e "$here[dev,report,ray]" >"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" >&2
  echo "[setup] pip install failed (full log: $log)" >&2
  exit 1
fi
rm -f "$log"
"$venv/bin/python" -c "import jax, flax, mujoco, orbax.checkpoint; print('[setup] ok: jax', jax.__version__, 'flax', flax.__version__, 'mujoco', mujoco.__version__)"
