#!/usr/bin/env bash
# Issue 44.5, after the eighth try: its model (--group-cores --jitter --local-jitter --warmup 2) on every
# production-loop grid and its profiles, as the sixth try's rule asks (docs/planner.md "eighth"). prod1-prod6: one
# profile before, one after (and both pooled); prod7-prod10: the 3 + 3 pools and all six; prod11: the interleaved
# pool. -> results/bench/plan_44/eighth_model/pN_{before,after,both,all6,all4}.json, eighth_model_log.txt
set -uo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
O=results/bench/plan_44/eighth_model
v() {  # grid number, name, profiles
  local n=$1 name=$2; shift 2
  local runs=results/bench/async_production_planval$n.json
  printf '%s p%s %s: ' "$(date -u +%H:%M:%S)" "${n:-1}" "$name"
  JAX_PLATFORMS=cpu $PY -m research.planner validate --group-cores --jitter --local-jitter --warmup 2 --runs $runs --profile-from "$@" --json $O/p${n:-1}_$name.json 2>&1 \
    | grep -E "^median|^error" | tail -1
}
for n in "" 2 3 4 5 6; do
  v "$n" before results/bench/plan_profile_prod$n
  v "$n" after results/bench/plan_profile_prod${n}_after
done
for n in 7 8 9 10; do
  P=results/bench/plan_profile_prod$n
  v $n before $P/b1 $P/b2 $P/b3
  v $n after $P/a1 $P/a2 $P/a3
  v $n all6 $P/b1 $P/b2 $P/b3 $P/a1 $P/a2 $P/a3
done
P=results/bench/plan_profile_prod11
v 11 all4 $P/p0 $P/p1 $P/p2 $P/p3
# every grid with all its profiles pooled (prod1-prod6: the one before and the one after; written after the lines
# above had run, so descriptive, not the pre-registered judgement)
for n in "" 2 3 4 5 6; do
  v "$n" both results/bench/plan_profile_prod$n results/bench/plan_profile_prod${n}_after
done
