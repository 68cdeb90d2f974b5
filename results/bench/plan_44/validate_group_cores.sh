#!/usr/bin/env bash
# Issue 44.5, fifth try (docs/planner.md "Issue 44.5, fifth: concurrent slot steps' cores from their measured
# concurrency"): the variant under test `--group-cores --jitter --warmup 2` on prod8 (fresh, criteria 1-3) and prod7
# (criterion 4) with their pooled profiles; reported beside: prod8 with `--group-cores --warmup 2` (lockstep) and
# without the change, and the stored single-profile grids with the variant.
# -> results/bench/plan_44/validate_gc_<name>.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
out=results/bench/plan_44
v() {  # name, runs, then validate flags
  local name=$1 runs=$2; shift 2
  echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) $name"
  JAX_PLATFORMS=cpu $PY -m research.planner validate "$@" --runs $runs --json $out/validate_gc_$name.json | tail -2 | head -1
}
for g in 8 7; do
  P=results/bench/plan_profile_prod$g
  R=results/bench/async_production_planval$g.json
  v prod${g}_before $R --group-cores --jitter --warmup 2 --profile-from $P/b1 $P/b2 $P/b3
  v prod${g}_after $R --group-cores --jitter --warmup 2 --profile-from $P/a1 $P/a2 $P/a3
done
P=results/bench/plan_profile_prod8
R=results/bench/async_production_planval8.json
v prod8_before_lockstep $R --group-cores --warmup 2 --profile-from $P/b1 $P/b2 $P/b3
v prod8_after_lockstep $R --group-cores --warmup 2 --profile-from $P/a1 $P/a2 $P/a3
v prod8_before_without $R --jitter --warmup 2 --profile-from $P/b1 $P/b2 $P/b3
v prod8_after_without $R --jitter --warmup 2 --profile-from $P/a1 $P/a2 $P/a3
for spec in prod4:plan_profile_prod4:async_production_planval4 prod4_after:plan_profile_prod4_after:async_production_planval4 \
            prod5:plan_profile_prod5:async_production_planval5 prod5_after:plan_profile_prod5_after:async_production_planval5 \
            prod6:plan_profile_prod6:async_production_planval6 prod6_after:plan_profile_prod6_after:async_production_planval6 \
            vla:plan_profile_vla:async_production_vla; do
  IFS=: read -r name prof runs <<<"$spec"
  v $name results/bench/$runs.json --group-cores --jitter --warmup 2 --profile-from results/bench/$prof
done
echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) end"
