#!/usr/bin/env bash
# The object-suite recipe's SFT stage and its measurements, shared by the attempts from the fourteenth on:
#   bash sft_stage.sh RUN_DIR GROUND_DIR GROUND_SECONDS [extra `train sft` flags...]
# SFT from GROUND_DIR (an `experiments/object_suite_binding.py --save-init` output) on the sixth attempt's demos
# (runs/i22b/demos-swap300, deterministic, their 20 min 05 s = 1205 s counted) with the sixth recipe's flags plus
# the extra ones (later flags win), a time limit of what is left of 60 min minus 1 min, then the standard
# evaluation (seed 0, 80 episodes) and the seed-7 target probe (40 episodes). Prints the recipe's total.
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=${1:?run dir}; GROUND=${2:?grounding dir}; G=${3:?grounding seconds}; shift 3
mkdir -p "$R"
py=.venv/bin/python
stamp() { date -u +%H:%M:%S; uptime; }
DEMOS_S=1205
SFT="--preset sft-small --env.suite object --model.aux-target grasp_place --model.target-conditioning
     --model.aux-grasp-bins 25 --sft.target-noise 0.1 --sft.aux-start-weight 5 --sft.aux-target-weight 1
     --sft.eval-every -1 --sft.num-steps 1800"
git rev-parse HEAD
left=$(( (3600 - DEMOS_S - G) / 60 - 1 ))
echo "extra SFT flags: $*; SFT time limit $left min"
T2=$(date +%s)
stamp; /usr/bin/time -v $py -m vlajax.train sft $SFT --data.dataset-dir runs/i22b/demos-swap300 --output-dir $R/final \
    --sft.init-from "$GROUND" --sft.time-limit-minutes $left "$@" > $R/sft.log 2>&1; stamp
S=$(( $(date +%s) - T2 ))
echo "recipe total: demos $DEMOS_S + grounding $G + SFT $S = $(( DEMOS_S + G + S )) s"
stamp; $py -m vlajax.train eval --preset sft-small --checkpoint $R/final/checkpoints --suite object \
    --output-dir $R/final > $R/eval.log 2>&1; stamp
tail -1 $R/eval.log
$py experiments/object_suite_target_probe.py --checkpoint $R/final/checkpoints --eval-seed 7 \
    --episodes-per-task 10 --json $R/probe-pred.json > $R/probe.log 2>&1; stamp
