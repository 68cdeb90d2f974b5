#!/usr/bin/env bash
# The one prepared GPU check (docs/gpu.md): installs the carried wheels, then runs
# `python -m vlajax.bench gpu-check` (vlajax/bench/gpu_check.py), which writes OUT/gpu_check.json and
# OUT/gpu_check.log. No network is used.
#
#   bash scripts/gpu_check.sh [--wheels DIR] [--python PY] [gpu-check options: --out, --deadline-s, --rows, --dry-run]
#
#   --wheels DIR  pip-install DIR/*.whl (collected by scripts/collect_wheels.sh) into /tmp/vlajax_site, with
#                 --no-index --no-deps, and put it first on PYTHONPATH (the machine's own packages stay below)
#   --fixtures DIR  a copy of ../shared/fixtures (or part of it: openpi/policies is what the parity row reads; the
#                 device machine has no ../shared): linked as ../shared/fixtures when that does not exist
#   --python PY   the interpreter (default: $PYTHON, else .venv/bin/python when it exists, else python3)
#   --out         default: $OUT when set (the device machine's return folder), else gpu_check_out
# Exit status: gpu-check's (0: no row failed; 1: a row failed; 2: a refused command line), or 3 when the
# wheels do not install.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
wheels="" fixtures="" py="${PYTHON:-}" args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) wheels="${2:?--wheels needs a folder}"; shift 2 ;;
    --python) py="${2:?--python needs an interpreter}"; shift 2 ;;
    --fixtures) fixtures="${2:?--fixtures needs a folder}"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi
case " ${args[*]-} " in *" --out "*) ;; *) args+=(--out "${OUT:-gpu_check_out}") ;; esac

if [ -n "$wheels" ]; then
  ls "$wheels"/*.whl >/dev/null 2>&1 || { echo "error: --wheels $wheels: no .whl files there" >&2; exit 3; }
  echo "[gpu_check.sh] installing $(ls "$wheels"/*.whl | wc -l) wheels from $wheels into /tmp/vlajax_site"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/vlajax_site \
    "$wheels"/*.whl || { echo "error: the wheels in $wheels did not install" >&2; exit 3; }
  export PYTHONPATH="/tmp/vlajax_site:$repo${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -n "$fixtures" ]; then
  [ -d "$fixtures" ] || { echo "error: --fixtures $fixtures: not a folder" >&2; exit 2; }
  if [ -e "$repo/../shared/fixtures" ]; then
    echo "[gpu_check.sh] $repo/../shared/fixtures exists: --fixtures $fixtures not linked"
  else
    mkdir -p "$repo/../shared" && ln -s "$(cd "$fixtures" && pwd)" "$repo/../shared/fixtures" \
      && echo "[gpu_check.sh] $repo/../shared/fixtures -> $fixtures"
  fi
fi
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
"$py" -c "import sys, jax, jaxlib; print('[gpu_check.sh]', sys.executable, 'jax', jax.__version__, 'jaxlib', \
jaxlib.__version__, 'backend', jax.default_backend())" || echo "[gpu_check.sh] jax does not import (the check records why)"
exec "$py" -m vlajax.bench gpu-check "${args[@]}"
