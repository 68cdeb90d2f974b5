"""experiments/libero-learning/lift.py: the pre-registered RL-lift verdict on synthetic eval JSON -- a clear lift,
no change, a clear harm, fewer than 3 seeds, and an episode with an error refused."""

import importlib.util
import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _mod():
    spec = importlib.util.spec_from_file_location("libero_lift", ROOT / "experiments" / "libero-learning" / "lift.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclass looks its module up)
    spec.loader.exec_module(mod)
    return mod


def _eval(path, outcomes):
    eps = [{"id": f"t{t}-i{i}", "task": t, "init": i, "success": bool(s)} for (t, i), s in outcomes.items()]
    path.write_text(json.dumps({"episodes": eps}))
    return str(path)


PAIRS = [(t, i) for t in (2, 5) for i in range(10)]


@pytest.mark.parametrize("rl_rate,verdict", [(1, "LIFT"), (None, "NO DETECTABLE LIFT"), (0, "HARM")])
def test_verdicts(tmp_path, rl_rate, verdict):
    lift = _mod()
    sft = _eval(tmp_path / "sft.json", {p: k % 2 for k, p in enumerate(PAIRS)})  # 50%
    rl = [_eval(tmp_path / f"rl{s}.json", {p: (k % 2 if rl_rate is None else rl_rate) for k, p in enumerate(PAIRS)})
          for s in range(3)]
    out = lift.main(lift.Args(sft=sft, rl=tuple(rl), json=str(tmp_path / "v.json")))
    assert out["verdict"] == verdict and out["pairs"] == 20 and out["seeds"] == 3
    assert out["lift_pp"] == {1: 50.0, None: 0.0, 0: -50.0}[rl_rate]
    assert json.loads((tmp_path / "v.json").read_text())["verdict"] == verdict
    lo, hi = out["ci95_pp"]
    assert lo <= out["lift_pp"] <= hi


def test_fewer_seeds_and_errors(tmp_path):
    lift = _mod()
    sft = _eval(tmp_path / "sft.json", {p: 0 for p in PAIRS})
    rl = _eval(tmp_path / "rl.json", {p: 1 for p in PAIRS})
    out = lift.main(lift.Args(sft=sft, rl=(rl, rl)))
    assert out["verdict"] == "NOT MEASURED AT 3 SEEDS" and out["lift_pp"] == 100.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"episodes": [{"id": "x", "task": 2, "init": 0, "error": "worker died"}]}))
    with pytest.raises(SystemExit, match="^error: .*not a result"):
        lift.outcomes(str(bad))
