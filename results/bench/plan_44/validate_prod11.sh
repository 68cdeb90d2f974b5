#!/usr/bin/env bash
# Issue 44.5, eighth try (docs/planner.md "Issue 44.5, eighth: profiles interleaved with the grid's repeats"): its
# validations of grid 11 (run at 54b9bc4 with this body inline; the same commands since moved to
# validate_interleaved.sh). -> results/bench/plan_44/validate_p11_*.json, p11_concurrency.txt, p11_criteria.txt
exec bash "$(dirname "$0")/validate_interleaved.sh" 11
