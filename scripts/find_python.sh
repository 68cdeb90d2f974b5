#!/usr/bin/env bash
# Prints the path of a working Python 3.12 interpreter, or fails with a clear message.
# Order: $VLAJAX_PYTHON, `python3.12` on PATH (when it really runs; pyenv shims may not),
# then pyenv's installed 3.12.x, then `python3` if it is already 3.12+.
set -u
try() { "$1" -c 'import sys; assert sys.version_info[:2] >= (3, 12)' >/dev/null 2>&1 && { command -v "$1" || echo "$1"; }; }
if [ -n "${VLAJAX_PYTHON:-}" ] && try "$VLAJAX_PYTHON"; then exit 0; fi
if try python3.12; then exit 0; fi
if command -v pyenv >/dev/null 2>&1; then
  for p in "$(pyenv root)"/versions/3.12*/bin/python3.12; do
    [ -x "$p" ] && try "$p" && exit 0
  done
fi
for p in "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
  [ -x "$p" ] && try "$p" && exit 0
done
if try python3; then exit 0; fi
echo "vlajax needs Python 3.12 (jax 0.12 requires it). Install it (e.g. 'pyenv install 3.12') or set VLAJAX_PYTHON=/path/to/python3.12." >&2
exit 1
