#!/usr/bin/env bash
# Runs pytest on CPU with the project's venv python ($1); the rest are pytest arguments.
# pytest's exit code 5 ("no tests collected") is a failure here, never a silent pass.
set -u
py="$1"; shift
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
"$py" -m pytest --timeout=900 --durations=30 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests (exit code 5); the suite must not be empty" >&2
  exit 1
fi
exit "$rc"
