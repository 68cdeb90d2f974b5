"""Issue 44.5's criteria 2 and 3 (docs/planner.md, sixth try onward) from one `plan validate --json` file: the
median |error| of the four mjx slot-mode rows, and the mjx rollout_async / train_async+rollout_async rows'
predicted vs measured requests per inference call. Usage: criteria.py VALIDATE_JSON"""

import json
import sys

import numpy as np

rows = {(r["regime"], r["mode"]): r for r in json.load(open(sys.argv[1]))["rows"]}
slot = ["rollout_async", "train_async+rollout_async", "+streaming", "+partial_rollout"]
errs = [rows[("mjx", m)]["error"] for m in slot]
print(f"criterion 2: mjx slot rows median |error| {100 * np.median(np.abs(errs)):.1f}% "
      f"({', '.join(f'{100 * e:+.1f}' for e in errs)}%)")
for m in slot[:2]:
    r = rows[("mjx", m)]
    pred, meas = r["predicted_inference_batch"], r["measured_inference_batch"]
    print(f"criterion 3: mjx {m} requests per call predicted {pred:.2f} measured {meas:.2f} "
          f"(off by {abs(pred - meas):.3f})")
rest = [r for (g, m), r in rows.items() if g != "mjx" and r.get("measured_inference_batch")]
if rest:  # reported beside, no criterion: the C regimes' batches
    print("beside: requests per call predicted / measured " + ", ".join(
        f"{r['regime']} {r['mode']} {r['predicted_inference_batch']:.2f} / {r['measured_inference_batch']:.2f}"
        for r in rest))
