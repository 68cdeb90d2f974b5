"""Each profile's slot-step concurrency (median serial wall / median threaded wall, as `plan profile` computes it)
and the spread of its per-round ratios, per physics. Usage: step_concurrency.py PROFILES_DIR (its b1..a3, in the
protocol's order: the profiles before the grid, then those after)."""

import json
import pathlib
import sys

import numpy as np

root = pathlib.Path(sys.argv[1])
for run in sorted((p for p in root.iterdir() if (p / "profile.json").is_file()),
                  key=lambda p: (not p.name.startswith("b"), p.name)):
    raw = json.loads((run / "profile.json").read_text())["raw"]
    row = []
    for ph in ("jax", "c"):
        s, t = np.array(raw[f"{ph}/steps_serial"]), np.array(raw[f"{ph}/steps_threads"])
        row.append(f"{ph} {np.median(s) / np.median(t):.2f} ({len(s)} rounds, per-round "
                   f"{np.min(s / t):.2f}-{np.max(s / t):.2f})")
    print(run.name, "; ".join(row))
