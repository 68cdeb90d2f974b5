"""Every checkpoint is a policy (slow: real tiny SFT, sync RL and async RL runs, MJX closed loops).

One SFT run (token head, 2 steps on the synthetic dataset), a sync GRPO run and an async GRPO
run from it (1 update each, pixels). Each checkpoint directory: `eval --checkpoint` works;
`python -m vlajax.serve` serves it to openpi's own client. The SFT checkpoint served and
evaluated remotely (`eval --policy-server`) gives the local eval's table and the same
trajectories (the GIFs of the first episodes are byte-identical).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from tests.serve.test_openpi_client import REPO, Served, _env, check_openpi_client, openpi_client
from tests.sft.conftest import tiny_config, write_dataset
from vlajax.config.schema import EnvConfig, get_config

pytestmark = pytest.mark.slow

EVAL_ENV = EnvConfig(suite="goal", obs_mode="pixels", num_envs=2, image_size=32, episode_length=8)


def _sft(root: str) -> str:
    ds = write_dataset(os.path.join(root, "demos"))
    cfg = tiny_config(ds, os.path.join(root, "sft"), num_steps=2, eval_every=-1)
    cfg = cfg.replace(model=dataclasses.replace(cfg.model, action_head="tokens"), env=EVAL_ENV)
    from vlajax.sft import loop as sft

    return sft.train(cfg)["checkpoint_dir"]


def _rl(root: str, name: str, init_from: str, *extra: str) -> str:
    """`python -m vlajax.train rl` (as users run it: one CPU device) for one tiny GRPO update. -> checkpoint dir."""
    out = os.path.join(root, name)
    args = [sys.executable, "-m", "vlajax.train", "rl", "--preset", "rl-grpo-tokens", "--output-dir", out,
            "--rl.init-from", init_from, "--env.num-envs", "4", "--env.episode-length", "8", "--rl.num-iterations", "1",
            "--rl.group-size", "2", "--rl.num-minibatches", "1", "--rl.eval-every", "0",
            "--rl.eval-episodes-per-task", "1", "--rl.chunk-steps", "4", "--checkpoint.async-save", "false",
            "--logging.progress", "none", "--logging.tensorboard", "false", "--logging.video-every", "0", *extra]
    r = subprocess.run(args, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return os.path.join(out, "checkpoints")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    root = str(tmp_path_factory.mktemp("policies"))
    out = {"sft": _sft(root)}
    out["rl"] = _rl(root, "rl", out["sft"])
    out["async-rl"] = _rl(root, "async", out["sft"], "--pipeline.enabled", "true", "--pipeline.num-slots", "1",
                          "--pipeline.require-batches", "1", "--rl.update-epochs", "1", "--rl.micro-batches", "1",
                          "--pipeline.queue-timeout-s", "1800", "--pipeline.watchdog-s", "3600")
    return out


def _eval_cfg(out: str, **sft):
    cfg = get_config("sft-tiny")
    return cfg.replace(output_dir=out, env=EVAL_ENV,
                       sft=dataclasses.replace(cfg.sft, eval_episodes_per_task=1, **sft),
                       logging=dataclasses.replace(cfg.logging, video_every=1))


@pytest.mark.parametrize("kind", ["sft", "rl", "async-rl"])
def test_eval_checkpoint_and_serve_to_openpi_client(checkpoints, tmp_path, kind):
    from vlajax.evaluation import closed_loop as evaluate
    from vlajax.policies.bridge import POLICY_FILE

    ckpt = checkpoints[kind]
    with open(os.path.join(ckpt, POLICY_FILE)) as f:
        written = json.load(f)
    assert written["source"] == kind  # every run writes its source (SFT too)
    # RL runs say what their rollouts stepped: 'auto' on one CPU device is C MuJoCo (rollout_physics)
    assert written.get("rollout_physics") == (None if kind == "sft" else "c")
    cfg = _eval_cfg(str(tmp_path)).replace(checkpoint=dataclasses.replace(get_config("sft-tiny").checkpoint, dir=ckpt))
    assert evaluate.run(cfg) == 0
    [name] = os.listdir(os.path.join(str(tmp_path), "eval"))
    with open(os.path.join(str(tmp_path), "eval", name, "eval.json")) as f:
        result = json.load(f)
    assert result["episodes"] == 4 and set(result["per_task"]) == {
        "goal/put_in_square", "goal/push_to_square", "goal/stack", "goal/press_button"}
    s = Served(ckpt, "--max-batch", "2")
    try:
        out = openpi_client(s.host, s.port)
        check_openpi_client(out)
        assert out["policy"]["source"] == kind
    finally:
        s.proc.terminate()
        s.proc.wait(120)


def test_remote_eval_equals_local_eval(checkpoints, tmp_path):
    from vlajax.evaluation import closed_loop as evaluate
    from vlajax.evaluation import remote

    ckpt = checkpoints["sft"]
    local_cfg = _eval_cfg(str(tmp_path / "local")).replace(
        checkpoint=dataclasses.replace(get_config("sft-tiny").checkpoint, dir=ckpt))
    assert evaluate.run(local_cfg) == 0
    s = Served(ckpt, "--max-batch", "4")
    try:
        assert remote.run(_eval_cfg(str(tmp_path / "remote"), eval_policy_server=s.url, eval_connections=4)) == 0
    finally:
        s.proc.terminate()
        s.proc.wait(120)
    [ldir] = os.listdir(tmp_path / "local" / "eval")
    ldir, rdir = tmp_path / "local" / "eval" / ldir, tmp_path / "remote" / "eval" / "goal-remote"
    local, far = (json.loads((d / "eval.json").read_text()) for d in (ldir, rdir))
    for key in ("per_task", "episode_success", "episode_steps", "mean_success", "seeds"):
        assert local[key] == far[key], key
    assert (ldir / "eval.md").read_text() == (rdir / "eval.md").read_text()
    gifs = sorted(p.name for p in ldir.glob("*.gif"))
    assert len(gifs) == 4
    for g in gifs:  # the same trajectories, frame for frame
        assert (ldir / g).read_bytes() == (rdir / g).read_bytes(), g
