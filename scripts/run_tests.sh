#!/usr/bin/env bash
# Runs pytest on CPU with the project's venv python ($1); the rest are pytest arguments.
# pytest's exit code 5 ("no tests collected") is a failure here, never a silent pass.
# VLAJAX_TEST_WORKERS (default 2, the CI machine's cores) pytest-xdist worker processes; each test module
# runs on one worker (--dist loadscope: module fixtures are built once); 0 = no workers, one process.
# With workers, a -m expression that deselects every test ends in xdist's INTERNALERROR (exit code 3,
# pytest-xdist#204) instead of exit code 5: a failure too, never a silent pass.
set -u
py="$1"; shift
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
workers="${VLAJAX_TEST_WORKERS:-2}"
if ! [[ "$workers" =~ ^[0-9]+$ ]]; then
  echo "error: VLAJAX_TEST_WORKERS=$workers must be a whole number (0 = no worker processes)" >&2
  exit 2
fi
"$py" -m pytest --timeout=900 --durations=30 -n "$workers" --dist loadscope "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests (exit code 5); the suite must not be empty" >&2
  exit 1
fi
exit "$rc"
