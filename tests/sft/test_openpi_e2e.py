"""An openpi checkpoint end to end, as a user runs it: import -> SFT -> async RL -> eval -> serve.

The openpi-layout checkpoint is the reference data's `pi05_libero` (`../shared/fixtures/openpi/
policies`: openpi's train config at its dummy sizes, with its norm stats and SentencePiece model);
the test skips when `../shared` is absent (a user's clone). SFT reads the LeRobot v3.0 dataset that
the real `lerobot` wrote (`tests/fixtures/lerobot-v3.0-images`). Sizes that do not change the
parameters are cut for the CPU: one camera slot (`model.num_cameras=1`), 64 prompt tokens, 4
denoising steps, 2 SFT steps, 2 RL updates of 2 envs, 10-step episodes. The phases run in one
process (`tests/sft/openpi_e2e_driver.py`: one JAX start, one CPU device), each through the `main`
its command line calls; the server is driven by the real `openpi-client` in its own venv
(`tests/serve/client_env.py`; that phase is skipped with a reason when the venv cannot be made).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "openpi", "policies")
DRIVER = os.path.join(REPO, "tests", "sft", "openpi_e2e_driver.py")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("XLA_FLAGS", None)  # one CPU device, like a user's run
    env["JAX_PLATFORMS"] = "cpu"
    return env


@pytest.mark.entry
@pytest.mark.skipif(not os.path.isdir(FIXTURES), reason="../shared/fixtures/openpi/policies is absent (a user's clone)")
def test_openpi_import_sft_rl_eval_serve(tmp_path):
    from tests.serve.client_env import client_python

    client, reason = client_python()
    r = subprocess.run([sys.executable, DRIVER, str(tmp_path), FIXTURES, client or ""], cwd=REPO, env=_env(),
                       capture_output=True, text=True, timeout=900)
    phases = {p["phase"]: p for p in map(json.loads, (ln for ln in r.stdout.splitlines() if ln.startswith("{")))}
    assert r.returncode == 0, f"{list(phases)}\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    print({k: p["seconds"] for k, p in phases.items()})  # pytest -s shows where the time goes

    imported = json.loads((tmp_path / "imported" / "policy.json").read_text())
    assert imported["openpi"]["train_config"] == "pi05_libero" and imported["model"]["flow_x1"] == "normal"
    s = phases["sft"]["result"]
    assert s["steps"] == 2 and np.isfinite(s["final_loss"]) and s["params"] == 589_632  # the reference tree's
    rl = phases["rl"]["result"]
    assert rl["updates"] == 2 and rl["summary"]["staleness/max"] <= 1
    e = phases["eval"]["result"]
    assert e["episodes"] == 1 and 0.0 <= e["mean_success"] <= 1.0

    import jax

    from vlajax.config.schema import get_config
    from vlajax.policies.run_files import load_policy

    for d in ("imported", "sft/checkpoints", "rl/checkpoints"):  # every phase's directory is a policy
        bridge, model, params, _, _ = load_policy(str(tmp_path / d), get_config("pi05-dummy"))
        assert bridge.model.family == "pi05" and sum(x.size for x in jax.tree.leaves(params)) == 589_632
    if client is None:
        pytest.skip(f"import -> SFT -> RL -> eval passed; serve not run: {reason}")
    out = phases["serve"]["result"]
    assert out["numpy"].startswith("1.")  # the client's own pinned numpy: the real openpi-client
    assert out["shapes"] == [[10, 4]] * 2 and out["finite"] and out["after_error"] == [10, 4]
    assert out["error"].startswith("Error in inference server:\nerror: missing key")
    assert out["policy"]["deterministic"] is False  # the flow starts from Gaussian noise
