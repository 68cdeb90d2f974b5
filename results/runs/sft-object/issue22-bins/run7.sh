#!/usr/bin/env bash
# Issue 22.4, seventh attempt: the sixth attempt's recipe (run.sh: grasp bins, W_AUX=1) with ONE change,
# the grounding stage trained 4000 steps instead of 2000.
#
# WHY (the sixth attempt's numbers, run.sh): on seed 0 it reached 33.8% (27/80; criterion not met). Its dev
# probe on seed 7 (devB, 45%) splits the failures in two: the first predicted grasp is nearest the named cube
# in 65% of episodes, and when it is, 69% succeed (the binned prediction fixed the precision: 23% in the fifth
# attempt); when it is not, 0%. So the remaining loss is the CHOICE of cube. The binned grounding chose the
# named cube on 71% of held-out first frames after 2000 steps (the regression grounding: 88%) and was still
# improving when the cosine schedule ran out (0.62 at 1250, 0.69 at 1500, 0.71 at 2000).
#
# CRITERION (written 2026-11-26 11:02 UTC, before any run of this attempt; not changed after): the same as the
#   fifth and sixth attempts': met <=> mean success >= 0.60 on the standard evaluation (`eval`, seed 0, 80
#   episodes) of the policy from ONE recipe (demos + grounding + SFT) of summed stage wall time <= 60 min.
#   No development runs and no choice among settings: the recipe below runs once and seed 0 is reported as it
#   falls, with the seed-7 probe beside it.
# Stage 1 is not re-run: it is the sixth attempt's command, whose output is byte-identical across runs (the
#   sha256 of every file of runs/i22g/demos-swap300 and runs/i22b/demos-swap300, made 3 h apart, match), so its
#   measured wall time this morning, 20 min 05 s (runs/i22b/recipe-demos.log, load 6-12), counts in the total.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22b
py=.venv/bin/python
stamp() { date -u +%H:%M:%S; uptime; }
DEMOS_SECONDS=1205  # stage 1, measured (see above)
T0=$(date +%s)
stamp; /usr/bin/time -v $py experiments/object_suite_binding.py --scenes 1000 --heldout-scenes 100 --steps 4000 \
    --state-token --target-conditioning --aux-grasp-bins 25 --save-init $R/ground7 --json $R/ground7.json \
    > $R/r7-ground.log 2>&1; stamp
used=$(( DEMOS_SECONDS + $(date +%s) - T0 ))
left=$(( (3600 - used) / 60 - 4 ))
echo "stages 1-2: $used s; SFT time limit $left min"
T2=$(date +%s)
stamp; /usr/bin/time -v $py -m vlajax.train sft --preset sft-small --env.suite object --model.aux-target grasp_place \
    --model.target-conditioning --model.aux-grasp-bins 25 --sft.target-noise 0.1 --sft.aux-start-weight 5 \
    --sft.num-steps 1800 --sft.eval-every -1 --data.dataset-dir $R/demos-swap300 --output-dir $R/final7 \
    --sft.init-from $R/ground7 --sft.aux-target-weight 1 --sft.time-limit-minutes $left > $R/r7-sft.log 2>&1; stamp
echo "recipe wall (stage 1 measured + 2 + 3): $(( used + $(date +%s) - T2 )) s"
# not part of the recipe's time: the standard evaluation (seed 0) and the seed-7 probe
stamp; $py -m vlajax.train eval --preset sft-small --checkpoint $R/final7/checkpoints --suite object \
    --output-dir $R/final7 > $R/r7-eval.log 2>&1; stamp
$py experiments/object_suite_target_probe.py --checkpoint $R/final7/checkpoints --eval-seed 7 \
    --episodes-per-task 10 --json $R/probe-final7-pred.json > $R/probe-final7.log 2>&1; stamp
