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

import pytest

from tests.serve.test_openpi_client import Served, check_openpi_client, openpi_client
from tests.sft.conftest import tiny_config, write_dataset
from vlajax.config import AsyncConfig, EnvConfig, get_config

pytestmark = pytest.mark.slow

EVAL_ENV = EnvConfig(suite="goal", obs_mode="pixels", num_envs=2, image_size=32, episode_length=8)


def _sft(root: str) -> str:
    ds = write_dataset(os.path.join(root, "demos"))
    cfg = tiny_config(ds, os.path.join(root, "sft"), num_steps=2, eval_every=-1)
    cfg = cfg.replace(model=dataclasses.replace(cfg.model, action_head="tokens"), env=EVAL_ENV)
    from vlajax import sft

    return sft.train(cfg)["checkpoint_dir"]


def _rl_config(root: str, name: str, init_from: str, **pipeline):
    cfg = get_config("rl-grpo-tokens")
    cfg = cfg.replace(
        output_dir=os.path.join(root, name), env=dataclasses.replace(EVAL_ENV, num_envs=4),
        rl=dataclasses.replace(cfg.rl, init_from=init_from, num_iterations=1, group_size=2, num_minibatches=1,
                               eval_every=0, eval_episodes_per_task=1, chunk_steps=4),
        checkpoint=dataclasses.replace(cfg.checkpoint, async_save=False, every_steps=1),
        logging=dataclasses.replace(cfg.logging, progress="none", tensorboard=False, video_every=0))
    if pipeline:
        cfg = cfg.replace(rl=dataclasses.replace(cfg.rl, update_epochs=1, micro_batches=1),
                          pipeline=AsyncConfig(enabled=True, **pipeline))
    return cfg


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    root = str(tmp_path_factory.mktemp("policies"))
    from vlajax.rl import async_loop, loop

    out = {"sft": _sft(root)}
    out["rl"] = loop.train(_rl_config(root, "rl", out["sft"]))["checkpoint_dir"]
    acfg = _rl_config(root, "async", out["sft"], num_slots=1, require_batches=1, staleness_threshold=1.0,
                      queue_timeout_s=1800.0, watchdog_s=3600.0)
    async_loop.train_async(acfg, timeout=3600)
    out["async-rl"] = os.path.join(acfg.output_dir, "checkpoints")
    return out


def _eval_cfg(out: str, **sft):
    cfg = get_config("sft-tiny")
    return cfg.replace(output_dir=out, env=EVAL_ENV,
                       sft=dataclasses.replace(cfg.sft, eval_episodes_per_task=1, **sft),
                       logging=dataclasses.replace(cfg.logging, video_every=1))


@pytest.mark.parametrize("kind", ["sft", "rl", "async-rl"])
def test_eval_checkpoint_and_serve_to_openpi_client(checkpoints, tmp_path, kind):
    from vlajax import evaluate
    from vlajax.policy import POLICY_FILE

    ckpt = checkpoints[kind]
    with open(os.path.join(ckpt, POLICY_FILE)) as f:
        assert json.load(f).get("source", "sft") == kind
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
    from vlajax import evaluate
    from vlajax.serve import remote

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
