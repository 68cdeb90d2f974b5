"""`python -m research.bench rl_peer`: per-round ratios, their median and a bootstrap interval."""

import json

import numpy as np
import pytest

from research.bench import rl_peer


def test_round_stats_pairs_rounds():
    runs = {"vlajax": [{"steps_per_s": s} for s in (2.0, 3.0, 4.0)],
            "brax": [{"steps_per_s": s} for s in (1.0, 3.0, 8.0)]}
    st = rl_peer.round_stats(runs)
    assert st["round_ratios"] == [2.0, 1.0, 0.5] and st["median_round_ratio"] == 1.0
    assert st["rounds_ratio_above_1"] == 1 and len(st["ci95_round_ratio"]) == 2
    with pytest.raises(ValueError):
        rl_peer.round_stats({"vlajax": runs["vlajax"], "brax": runs["brax"][:2]})


@pytest.mark.slow
def test_debug_run_reports_rounds(tmp_path):
    out = tmp_path / "peer.json"
    assert rl_peer.main(["--debug", "--iterations", "2", "--rounds", "2", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["rounds"] == 2 and len(r["round_ratios"]) == 2
    per = [v["steps_per_s"] / b["steps_per_s"] for v, b in zip(r["vlajax"]["rounds"], r["brax"]["rounds"])]
    assert np.allclose(r["round_ratios"], per)
    lo, hi = r["ci95_round_ratio"]
    assert lo <= r["median_round_ratio"] <= hi
    assert all("load_average_after" in x for x in r["vlajax"]["rounds"] + r["brax"]["rounds"])
