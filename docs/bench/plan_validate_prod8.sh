#!/bin/bash
# Issue 44.5, fifth try (session 34, pre-registered in docs/planner.md "Issue 44.5, fifth: concurrent slot steps' cores from their measured concurrency"; the protocol of prod7 ("fourth: pooled profiles on
# both sides of a fresh grid"): three profiles, the 18-row grid (the prod4 command), three profiles; nothing else
# running. Then the validations: docs/bench/plan_44/validate_group_cores.sh.
set -e
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
P=docs/bench/plan_profile_prod8
U=docs/bench/plan_validate_prod8_uptimes.txt
: > $U
echo "HEAD $(git rev-parse --short HEAD)" >> $U
for i in b1 b2 b3; do
  echo "profile $i start $(date -u +%T) $(uptime)" >> $U
  $PY -m vlajax.plan profile --from-bench docs/bench/async_production.json --out $P/$i
done
echo "bench start $(date -u +%T) $(uptime)" >> $U
$PY -m vlajax.bench async --preset rl-debug --envs 16 --slots 4 --horizon 8 --width 256 --updates 20 --repeats 3 --farm-scale 20 --json docs/bench/async_production_planval8.json
for i in a1 a2 a3; do
  echo "profile $i start $(date -u +%T) $(uptime)" >> $U
  $PY -m vlajax.plan profile --from-bench docs/bench/async_production.json --out $P/$i
done
echo "end $(date -u +%T) $(uptime)" >> $U
