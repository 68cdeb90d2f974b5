#!/usr/bin/env bash
# Issue 22.4, eighth attempt: keep the grounding's choice of cube through the SFT by FREEZING the VLM
# (`--model.trainable expert`: vision, text embedding, prefix transformer and state token frozen; the
# action expert, target/action/time projections and the aux head train).
#
# WHY (sixth/seventh attempts, results/runs/sft-object/issue22-bins): the binned grounding picks the named
# cube on 71% (2000 steps) / 79% (4000 steps) of held-out first frames, the action head succeeds 69% of the
# time when the policy's cube is right, but after the full-parameter SFT the policy's first-chunk cube is
# right on only 47.5-65% of episodes: the SFT's flow-loss gradient through the shared prefix undoes the
# binding. With the VLM frozen, the prefix features stay exactly the grounding's.
#
# CRITERION (written 2026-11-26 12:57 UTC, before any run of this attempt; not changed after): the same as
#   the fifth to seventh attempts': met <=> mean success >= 0.60 on the standard evaluation (`eval`, seed 0,
#   20 episodes per task = 80) of the policy from ONE recipe (demos + grounding + SFT) whose summed stage
#   wall time is <= 60 minutes on this shared 2-core machine. Stages 1-2 are the sixth recipe's (the same
#   commands; measured 20:05 + 19:02; their outputs runs/i22b/demos-swap300 and runs/i22b/ground-final are
#   reused, not re-run: the generator is deterministic (sha256-checked in the sixth attempt)); stage 3 is
#   timed here.
# DEVELOPMENT RULE (fixed now): two dev SFTs on eval seed 7 (10 episodes per task,
#   experiments/object_suite_target_probe.py) from the sixth attempt's dev grounding runs/i22b/ground:
#     devC: --model.trainable expert, --sft.aux-target-weight 1 (the aux head adapts on the frozen features)
#     devD: --model.trainable expert, --sft.aux-target-weight 0 (the aux head stays the grounding's)
#   The recipe's SFT (stage 3) runs with the better of devC / devD by seed-7 success if that is >= 50%
#   (sixth attempt's best dev: 45%); otherwise no seed-0 evaluation and the dev numbers are published.
#   Usage: bash run8.sh dev C|D; W_AUX=.. bash run8.sh recipe
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22b
py=.venv/bin/python
stamp() { date -u +%H:%M:%S; uptime; }
SFT="--preset sft-small --env.suite object --model.aux-target grasp_place --model.target-conditioning
     --model.aux-grasp-bins 25 --model.trainable expert --sft.target-noise 0.1 --sft.aux-start-weight 5
     --sft.num-steps 1800 --sft.eval-every -1"
case "${1:-}" in
  dev)
    v=${2:?C or D}; w=$([ "$v" = C ] && echo 1 || echo 0)
    stamp; /usr/bin/time -v $py -m vlajax.train sft $SFT --data.dataset-dir $R/demos-swap300 \
        --output-dir $R/dev$v --sft.init-from $R/ground --sft.aux-target-weight $w > $R/dev$v.log 2>&1; stamp
    $py experiments/object_suite_target_probe.py --checkpoint $R/dev$v/checkpoints --eval-seed 7 \
        --episodes-per-task 10 --json $R/probe-dev$v-pred.json > $R/probe-dev$v.log 2>&1; stamp ;;
  recipe)
    s12=$(( 20 * 60 + 5 + 19 * 60 + 2 ))  # the sixth recipe's measured stages 1-2
    left=$(( (3600 - s12) / 60 - 4 ))
    echo "SFT: aux weight ${W_AUX:?}, time limit $left min"
    T2=$(date +%s)
    stamp; /usr/bin/time -v $py -m vlajax.train sft $SFT --data.dataset-dir $R/demos-swap300 --output-dir $R/final8 \
        --sft.init-from $R/ground-final --sft.aux-target-weight $W_AUX --sft.time-limit-minutes $left \
        > $R/recipe8-sft.log 2>&1; stamp
    echo "recipe wall (stages 1-2 + 3): $(( s12 + $(date +%s) - T2 )) s"
    stamp; $py -m vlajax.train eval --preset sft-small --checkpoint $R/final8/checkpoints --suite object \
        --output-dir $R/final8 > $R/recipe8-eval.log 2>&1; stamp ;;
  *) echo "usage: run8.sh dev C|D | recipe" >&2; exit 2 ;;
esac
