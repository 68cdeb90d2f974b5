#!/bin/bash
# paired A/B: the VLA sync row at b18c147 (2026-11-27's 20 ms run) vs HEAD, same venv, same machine
for i in 1 2; do
  for side in old new; do
    dir=/tmp/old; [ $side = new ] && dir=/work/main
    cd $dir
    echo "== $side $i start $(date -u +%T) $(cat /proc/loadavg)"
    /work/main/.venv/bin/python -m vlajax.bench async --preset rl-ppo-flow --regimes mjx --modes sync --repeats 1 --updates 20 --json /work/notes/ab32/${side}_$i.json > /work/notes/ab32/${side}_$i.log 2>&1
    echo "== $side $i end $(date -u +%T) rc $? $(grep -o '"env_steps_per_s": [0-9.]*' /work/notes/ab32/${side}_$i.log | head -1)"
  done
done
