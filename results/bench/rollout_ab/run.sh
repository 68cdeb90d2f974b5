#!/bin/bash
# interleaved A/B: prev = HEAD cc75907 with vlajax/rl/rollout.py of c31e687^ (before the change); cur = cc75907
for i in 1 2 3; do
  for t in prev cur; do
    (cd /tmp/$t && /work/main/.venv/bin/python -m vlajax.bench rollout --decisions 8 --repeats 7 --json /tmp/robench/${t}_$i.json) > /tmp/robench/${t}_$i.log 2>&1
  done
done
while pgrep -f /tmp/robench/run.sh > /dev/null; do sleep 5; done
for i in 4 5; do
  for t in prev cur; do
    (cd /tmp/$t && /work/main/.venv/bin/python -m vlajax.bench rollout --decisions 8 --repeats 12 --json /tmp/robench/${t}_$i.json) > /tmp/robench/${t}_$i.log 2>&1
  done
done
