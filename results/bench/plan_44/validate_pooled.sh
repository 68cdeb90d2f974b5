#!/usr/bin/env bash
# Issue 44.5, fourth try (docs/planner.md "Issue 44.5, fourth"): prod7's rows with pooled profiles.
# -> results/bench/plan_44/validate_pooled_<name>.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
out=results/bench/plan_44
P=results/bench/plan_profile_prod7
runs=results/bench/async_production_planval7.json
v() {  # name, then validate flags
  local name=$1; shift
  echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) $name"
  JAX_PLATFORMS=cpu $PY -m research.planner validate "$@" --runs $runs --json $out/validate_pooled_$name.json | tail -2 | head -1
}
# the criterion: --jitter --warmup 2, before-pool and after-pool
v before_jitter_w2 --jitter --warmup 2 --profile-from $P/b1 $P/b2 $P/b3
v after_jitter_w2 --jitter --warmup 2 --profile-from $P/a1 $P/a2 $P/a3
# reported beside
v all_jitter_w2 --jitter --warmup 2 --profile-from $P/b1 $P/b2 $P/b3 $P/a1 $P/a2 $P/a3
for s in b1 b2 b3 a1 a2 a3; do v single_${s}_jitter_w2 --jitter --warmup 2 --profile-from $P/$s; done
v before_default_w2 --warmup 2 --profile-from $P/b1 $P/b2 $P/b3
v after_default_w2 --warmup 2 --profile-from $P/a1 $P/a2 $P/a3
v before_jitter_w0 --jitter --profile-from $P/b1 $P/b2 $P/b3
v after_jitter_w0 --jitter --profile-from $P/a1 $P/a2 $P/a3
v before_default_w0 --profile-from $P/b1 $P/b2 $P/b3
v after_default_w0 --profile-from $P/a1 $P/a2 $P/a3
echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) end"
