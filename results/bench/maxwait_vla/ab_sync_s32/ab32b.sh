#!/bin/bash
for i in 3 4 5 6; do
  if [ $((i % 2)) = 1 ]; then order="new old"; else order="old new"; fi
  for side in $order; do
    dir=/tmp/old; [ $side = new ] && dir=/work/main
    cd $dir
    echo "== $side $i start $(date -u +%T) $(cat /proc/loadavg)"
    /work/main/.venv/bin/python -m vlajax.bench async --preset rl-ppo-flow --regimes mjx --modes sync --repeats 1 --updates 20 --json /work/notes/ab32/${side}_$i.json > /work/notes/ab32/${side}_$i.log 2>&1
    echo "== $side $i end $(date -u +%T) rc $? $(grep -o '"env_steps_per_s": [0-9.]*' /work/notes/ab32/${side}_$i.log | head -1)"
  done
done
