#!/usr/bin/env bash
# How much of the fourteenth attempt's 72.5% is its SFT run? Its SFT again (same demos, same grounding
# runs/i22e/ground, same flags) with training seeds 1 and 2 (`--seed k --data.shuffle-seed k`: the flow and target
# noise, the batch order and the rendered grounding scenes), each evaluated once on seed 0 (80 episodes) and probed
# on seed 7. No time limit: these run beside each other and the test suite, so their wall time says nothing.
# Written 2026-11-27 ~02:00 UTC before the runs; a measurement of spread, not a new attempt: every figure is
# reported, none is chosen.   Usage: bash seeds14.sh K
set -euo pipefail
cd "$(dirname "$0")"
k=${1:?training seed}
bash ../sft_stage.sh runs/i22f-s$k runs/i22e/ground 693 --data.grounding-fraction 0.5 --data.grounding-scenes 2000 \
    --sft.num-steps 3600 --seed $k --data.shuffle-seed $k --sft.time-limit-minutes 0
