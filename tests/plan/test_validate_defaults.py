"""`plan validate`'s command line defaults to the model issue 44.5's eighth try validated (docs/planner.md):
`--jitter --local-jitter --group-cores --warmup 2`; `--no-jitter` alone gives the unjittered model (the local
option follows it), and `--no-jitter --no-group-cores --warmup 0` the plain one."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNS = ROOT / "docs/bench/async_production_planval11.json"  # the grid of the eighth try
PROFILE = ROOT / "docs/bench/plan_profile_prod11/p0"  # its profile before the first repeat


def _validate(tmp_path, name: str, *flags: str) -> dict:
    out = tmp_path / f"{name}.json"
    r = subprocess.run([sys.executable, "-m", "vlajax.plan", "validate", "--runs", str(RUNS), "--profile-from",
                        str(PROFILE), "--seeds", "1", "--json", str(out), *flags],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(out.read_text())


def _predicted(d: dict) -> list[float]:
    return [row["predicted_env_steps_per_s"] for row in d["rows"]]


def test_the_defaults_are_the_validated_model_and_no_jitter_alone_turns_the_draws_off(tmp_path):
    default = _validate(tmp_path, "default")
    explicit = _validate(tmp_path, "explicit", "--jitter", "--local-jitter", "--group-cores", "--warmup", "2")
    assert (default["jitter"], default["local_jitter"], default["group_cores"], default["warmup"]) == (True, True,
                                                                                                      True, 2)
    assert _predicted(default) == _predicted(explicit)
    plain = _validate(tmp_path, "plain", "--no-jitter", "--no-group-cores", "--warmup", "0")
    assert (plain["jitter"], plain["local_jitter"], plain["group_cores"], plain["warmup"]) == (False, False, False, 0)
    assert _predicted(plain) != _predicted(default)
    # the mjx slot modes' batch: lockstep slots without the draws (every call gathers them all), fewer with them
    batch = {m: [r["predicted_inference_batch"] for r in d["rows"] if (r["regime"], r["mode"]) == ("mjx",
             "rollout_async")][0] for m, d in (("default", default), ("plain", plain))}
    assert batch["plain"] > batch["default"]
