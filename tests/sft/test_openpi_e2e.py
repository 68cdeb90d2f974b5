"""`pi05-dummy` end to end, as a user runs it: openpi checkpoint -> import -> SFT -> async RL -> eval.

The openpi-layout checkpoint is the reference data's (`../shared/fixtures/openpi/pi05`, openpi's
dummy sizes); the test skips when `../shared` is absent (a user's clone). Sizes that do not change
the parameters are cut for the CPU: one 224x224 camera slot (`model.num_cameras=1`; the fixture's
SigLIP position embedding fixes 224), 64 prompt tokens, 4 denoising steps, 2 samples per batch.
Every phase is its own `python -m ...` process on one CPU device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "openpi", "pi05")

# sizes that leave the parameter shapes alone (see the module docstring)
SMALL = ("--model.num-cameras", "1", "--model.max-text-len", "64", "--model.num-denoise-steps", "4",
         "--env.cameras", "agentview", "--data.camera-map", "agentview=base_0_rgb", "--env.task", "goal/press_button",
         "--logging.progress", "none")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("XLA_FLAGS", None)  # one CPU device, like a user's run
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _run(*args: str, timeout: int = 900) -> dict:
    r = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=_env(), capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{args[:2]} failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


# slow (five processes, 2-3 minutes on 2 cores); each phase has a fast default test: the import
# (tests/models/test_openpi_import.py), SFT / RL updates of the pi tree and what they train
# (tests/sft/test_openpi_trainable.py), the pi inputs and bridge (tests/sft/test_openpi_inputs.py),
# the async RL CLI (tests/pipeline/test_fault_exit.py)
@pytest.mark.slow
@pytest.mark.entry
@pytest.mark.skipif(not os.path.isdir(FIXTURE), reason="../shared/fixtures/openpi is absent (a user's clone)")
def test_pi05_dummy_import_sft_rl_eval(tmp_path):
    from vlajax.envs.tabletop import tasks
    from vlajax.models import sp_tokenizer

    texts = sorted({i for t in tasks.TASKS for i in t.instructions()})
    tok = sp_tokenizer.train_tiny_model(str(tmp_path / "tokenizer.model"), texts)
    demos, imported, sft, rl = (str(tmp_path / d) for d in ("demos", "imported", "sft", "rl"))
    train = ("vlajax.train",)

    # a handful of demos at 32x32 (the model resizes with pad to 224), C MuJoCo physics
    _run(*train, "demos", "--preset", "pi05-dummy", "--out", demos, "--env.num-envs", "2", "--env.episode-length",
         "80", "--env.physics-impl", "c", "--data.episodes-per-task", "2", *SMALL)

    # the openpi checkpoint -> a vlajax checkpoint (config.json, policy.json)
    _run("vlajax.models.import_openpi", "--checkpoint", FIXTURE, "--config", "pi05-dummy", "--out", imported,
         "--tokenizer", tok)
    assert os.path.isfile(os.path.join(imported, "policy.json"))

    # SFT 20 steps from the imported weights on our demos
    s = _run(*train, "sft", "--preset", "pi05-dummy", "--sft.init-from", imported, "--data.dataset-dir", demos,
             "--output-dir", sft, "--sft.num-steps", "20", "--data.batch-size", "2", "--sft.eval-every", "-1",
             "--model.tokenizer-path", tok, *SMALL)
    assert s["steps"] == 20 and np.isfinite(s["final_loss"])

    # RL: 2 GRPO updates through the async pipeline at staleness 1, the VLM frozen (piRL), then eval
    r = _run(*train, "rl", "--preset", "pi05-dummy", "--rl.init-from", os.path.join(sft, "checkpoints"),
             "--output-dir", rl, "--pipeline.enabled", "--pipeline.staleness-threshold", "1",
             "--rl.num-iterations", "2", "--env.num-envs", "2", "--rl.group-size", "2", "--env.episode-length", "20",
             "--model.trainable", "expert", *SMALL)
    assert r["updates"] == 2 and r["evals"] and 0.0 <= r["evals"][-1]["mean_success"] <= 1.0

    # every directory above is a policy `vlajax.load_policy` (and so `eval`) reads
    import jax

    from vlajax.config import get_config
    from vlajax.run_files import load_policy

    sizes = set()
    for d in (imported, os.path.join(sft, "checkpoints"), os.path.join(rl, "checkpoints")):
        bridge, model, params, _, _ = load_policy(d, get_config("pi05-dummy"))
        assert type(model).__name__ != "VLA" and bridge.model.family == "pi05"
        sizes.add(sum(x.size for x in jax.tree.leaves(params)))
    assert sizes == {589_632}  # the reference tree's parameter count (meta.json), in every phase
