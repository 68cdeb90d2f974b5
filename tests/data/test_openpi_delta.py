"""openpi's DeltaActions in SFT (vlajax.data.openpi): a policy trained on delta actions (an imported
`pi0_libero`, whose openpi config has `extra_delta_transform=True`) is fine-tuned on delta targets,
before normalization, with the delta actions' statistics, and its saved policy turns them back with
AbsoluteActions; a dataset the mask cannot apply to is refused before anything compiles.

Data: the LeRobot v3.0 dataset the real `lerobot` wrote (`tests/fixtures/lerobot-v3.0-images`:
state [8], actions [7], LIBERO's dims) and, where present, the reference data's real pi0_libero
inputs and outputs (`../shared/fixtures/openpi/policies/pi0_libero/cases.npz`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.openpi import OPENPI_CONFIGS, OpenpiTransforms, make_bool_mask
from vlajax.config.schema import ConfigError, DataConfig, ModelConfig, SFTConfig, TrainConfig
from vlajax.data import openpi
from vlajax.data.build import make_loader, make_source
from vlajax.data.lerobot import LeRobotData
from vlajax.data.normalize import load_norm_stats, unnormalize
from vlajax.data.source import ActionChunkSource
from vlajax.data.transforms import Compose
from vlajax.envs.tabletop import tasks
from vlajax.models import sp_tokenizer
from vlajax.policies.bridge import Bridge

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATASET = os.path.join(REPO, "tests", "fixtures", "lerobot-v3.0-images")
CASES = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "openpi", "policies", "pi0_libero", "cases.npz")
MASK = OPENPI_CONFIGS["pi0_libero"].transforms.delta_mask  # (6, -1): six joints delta, the gripper absolute
HORIZON = 4


def openpi_delta(state: np.ndarray, actions: np.ndarray, mask) -> np.ndarray:
    """openpi's `transforms.DeltaActions.__call__` (15a9616), its three lines verbatim, on a copy."""
    actions = np.array(actions)
    mask = np.asarray(mask)
    dims = mask.shape[-1]
    actions[..., :dims] -= np.expand_dims(np.where(mask, state[..., :dims], 0), axis=-2)
    return actions


def _samples(kind: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(state [8], actions [H, 7]) pairs: the reference data's pi0_libero cases (openpi's own state
    and absolute actions), the LeRobot fixture's chunks, or synthetic arrays."""
    if kind == "openpi-cases":
        if not os.path.isfile(CASES):
            pytest.skip(f"{CASES} is absent (../shared is not here: a user's clone)")
        d = np.load(CASES)
        return [(d[f"case{i}/in/observation/state"], d[f"case{i}/out/actions"].astype(np.float32)) for i in range(3)]
    if kind == "lerobot":
        src = ActionChunkSource(LeRobotData(DATASET), 50)
        return [(src[i]["state"], src[i]["actions"]) for i in (0, 7, len(src) - 1)]
    rng = np.random.default_rng(0)
    return [(rng.normal(size=8).astype(np.float32), rng.normal(size=(10, 7)).astype(np.float32)) for _ in range(3)]


@pytest.mark.parametrize("kind", ["openpi-cases", "lerobot", "synthetic"])
def test_delta_actions_is_openpis_formula(kind):
    for state, actions in _samples(kind):
        before = actions.copy()
        out = openpi.DeltaActions(MASK)({"state": state, "actions": actions})
        np.testing.assert_array_equal(out["actions"], openpi_delta(state, actions, MASK))
        np.testing.assert_array_equal(out["actions"][:, 6], actions[:, 6])  # the gripper stays absolute
        assert not np.allclose(out["actions"][:, :6], actions[:, :6])
        np.testing.assert_array_equal(actions, before)  # the source's arrays are not changed
    assert openpi.DeltaActions(())({"state": state, "actions": actions})["actions"] is actions  # no mask: as is


@pytest.mark.parametrize("kind", ["openpi-cases", "lerobot"])
def test_sft_delta_then_serving_absolute_is_the_identity(kind):
    """SFT's DeltaActions, then the policy's AbsoluteActions (`OpenpiTransforms.robot_actions`, what
    eval / serve / the RL rollout run) with the same state: the original actions on every dim."""
    t = OPENPI_CONFIGS["pi0_libero"].transforms
    for state, actions in _samples(kind):
        delta = openpi.DeltaActions(t.delta_mask)({"state": state, "actions": actions})["actions"]
        back = np.asarray(t.robot_actions(jnp.asarray(delta)[None], jnp.asarray(state)[None]))[0]
        np.testing.assert_allclose(back, actions, rtol=0, atol=1e-6)
        host = openpi.AbsoluteActions(t.delta_mask)({"state": state, "actions": delta})["actions"]
        np.testing.assert_allclose(host, actions, rtol=0, atol=1e-6)


# ------------------------------------------------------------------ the SFT data pipeline


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> str:
    texts = sorted({i for t in tasks.TASKS for i in t.instructions()})
    return sp_tokenizer.train_tiny_model(str(tmp_path_factory.mktemp("sp") / "tiny.model"), texts)


def pi0_cfg(tokenizer: str, **sft) -> TrainConfig:
    """A small π0 on the LeRobot fixture (one camera slot, 28x28 images, horizon 4, z-score as pi0_libero)."""
    m = ModelConfig(family="pi0", paligemma_variant="dummy", action_expert_variant="dummy", siglip_variant="mu/14",
                    siglip_depth=1, image_size=28, num_cameras=1, vocab_size=1024, max_text_len=16, action_dim=8,
                    state_dim=8, action_horizon=HORIZON, num_denoise_steps=2, tokenizer_path=tokenizer,
                    flow_x1="normal")
    data = DataConfig(dataset_dir=DATASET, batching="fixed", state_norm="mean_std", action_norm="mean_std",
                      drop_cameras=("wrist",), camera_map=("agentview=base_0_rgb",), batch_size=2, num_threads=0,
                      prefetch=0)
    return TrainConfig(model=m, data=data, sft=SFTConfig(**sft))


@pytest.mark.parametrize("mask", [MASK, ()], ids=["delta-mask", "no-mask"])
def test_sft_pipeline_targets_are_delta_actions_before_normalizing(tokenizer, mask):
    cfg = pi0_cfg(tokenizer)
    loader, info = make_loader(cfg, None, num_epochs=1, delta_mask=mask)
    src = make_source(cfg)
    raw = load_norm_stats(src.data.root, ("action",))["action"]
    assert info.delta_mask == tuple(mask)
    want = []
    for i in range(len(src)):
        rec = src[i]
        target = openpi_delta(rec["state"], rec["actions"], mask) if mask else rec["actions"]
        x = Compose(info.transforms.inputs)(rec)  # the loader's per-sample pipeline
        assert x["actions"].shape == (HORIZON, 8) and np.all(x["actions"][:, 7] == 0)  # zero-padded to 8
        np.testing.assert_allclose(unnormalize(x["actions"][:, :7], info.norm["actions"], "mean_std"), target,
                                   atol=2e-5)
        np.testing.assert_allclose(info.transforms.apply_outputs({"state": x["state"], "actions": x["actions"]})
                                   ["actions"], rec["actions"], atol=2e-5)  # outputs: back to absolute
        want.append(x["actions"])
    # the loader's batches hold exactly those targets
    for batch in loader:
        for row in np.asarray(batch["actions"])[np.asarray(batch["sample_mask"])]:
            assert min(np.abs(row - w).max() for w in want) < 1e-6
    loader.close()
    # statistics: the delta actions' on the masked dims, the dataset's elsewhere
    a = info.norm["actions"]
    np.testing.assert_array_equal(a.mean[6:], raw.mean[6:])
    if not mask:
        np.testing.assert_array_equal(a.mean, raw.mean)
        np.testing.assert_array_equal(a.std, raw.std)
        return
    deltas = np.concatenate([openpi_delta(src[i]["state"], src[i]["actions"], mask) for i in range(len(src))])
    np.testing.assert_allclose(a.mean[:6], deltas.mean(0)[:6], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.std[:6], deltas.std(0)[:6], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(a.q99[:6], np.quantile(deltas, 0.99, axis=0)[:6], rtol=1e-5, atol=1e-6)
    assert np.abs(a.mean[:6] - raw.mean[:6]).max() > 1e-3  # not the absolute actions' statistics


def test_a_mask_the_dataset_cannot_take_is_refused(tokenizer):
    cfg = pi0_cfg(tokenizer)
    with pytest.raises(ConfigError, match=r"src=X: the policy was trained on delta actions .* action has 7 dims < 9"):
        make_loader(cfg, None, delta_mask=make_bool_mask(8, -1), delta_from="src=X")
    vla = TrainConfig(model=ModelConfig(action_dim=7, state_dim=8), data=dataclasses.replace(cfg.data))
    with pytest.raises(ConfigError, match="is an openpi data transform; model.family='vla'"):
        openpi.check_delta(vla, make_source(cfg), MASK, "src=X")


# ------------------------------------------------------------------ sft.init_from


def _source_dir(path, cfg: TrainConfig, transforms: OpenpiTransforms | None) -> str:
    """A run directory's two json files as `import_openpi` writes them (no weights: not read here)."""
    from vlajax.policies.run_files import CONFIG_FILE, config_to_dict

    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, CONFIG_FILE), "w") as f:
        json.dump(config_to_dict(cfg), f)
    src = make_source(cfg)
    stats = load_norm_stats(src.data.root, ("action", "observation.state"))
    Bridge(cfg.model, ("agentview",), {"actions": stats["action"], "state": stats["observation.state"]},
           "mean_std", "mean_std", 4, (("agentview", "base_0_rgb"),), transforms).save(str(path))
    return str(path)


def test_init_from_reads_the_sources_delta_mask(tokenizer, tmp_path):
    from vlajax.sft import init_from

    cfg = pi0_cfg(tokenizer)
    libero = OPENPI_CONFIGS["pi0_libero"].transforms
    d = _source_dir(tmp_path / "pi0_libero", cfg, libero)
    assert init_from.delta_transforms(cfg.replace(sft=SFTConfig(init_from=d))) == libero
    assert init_from.delta_transforms(cfg) is None  # no init_from
    for name, t in (("pi05", OPENPI_CONFIGS["pi05_libero"].transforms), ("ours", None)):  # no delta mask
        run = cfg.replace(sft=SFTConfig(init_from=_source_dir(tmp_path / name, cfg, t)))
        assert init_from.delta_transforms(run) is None
        assert init_from.openpi_transforms(run) == t  # pi05_libero: still openpi's (its norm stats are openpi's)
    aloha = _source_dir(tmp_path / "aloha", cfg, OPENPI_CONFIGS["pi0_aloha"].transforms)
    with pytest.raises(ConfigError, match=r"pi0_aloha\) learned delta actions in openpi's ALOHA space"):
        init_from.delta_transforms(cfg.replace(sft=SFTConfig(init_from=aloha)))
    # no delta mask, but openpi's ALOHA space all the same: refused too, not trained silently on raw ALOHA data
    sim = OPENPI_CONFIGS["pi0_aloha_sim"].transforms
    assert sim.adapt_to_pi and not any(sim.delta_mask)
    with pytest.raises(ConfigError, match=r"pi0_aloha_sim\) learned its state and actions in openpi's ALOHA space.*"
                                          r"--sft.delta-actions off"):
        init_from.delta_transforms(cfg.replace(sft=SFTConfig(init_from=_source_dir(tmp_path / "sim", cfg, sim))))


def test_sft_cli_refuses_a_delta_mask_the_data_cannot_take(tokenizer, tmp_path):
    """`vlajax.train sft --sft.init-from` a policy whose delta mask is wider than the dataset: one
    `error:` line, exit 2, before anything compiles (no checkpoint directory)."""
    cfg = pi0_cfg(tokenizer)
    d = _source_dir(tmp_path / "src", cfg, dataclasses.replace(OPENPI_CONFIGS["pi0_libero"].transforms,
                                                               delta_mask=make_bool_mask(8, -1)))
    m = cfg.model
    args = ["sft", "--preset", "pi0-dummy", "--sft.init-from", d, "--output-dir", str(tmp_path / "out"),
            "--data.dataset-dir", DATASET, "--data.drop-cameras", "wrist", "--model.num-cameras", "1",
            "--env.cameras", "agentview", "--data.camera-map", "agentview=base_0_rgb", "--model.tokenizer-path",
            tokenizer, "--model.action-dim", str(m.action_dim), "--model.state-dim", str(m.state_dim),
            "--sft.num-steps", "1", "--data.batch-size", "2", "--sft.eval-every", "-1"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO}
    r = subprocess.run([sys.executable, "-m", "vlajax.train", *args], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2, r.stderr[-3000:]
    assert len(lines) == 1 and "trained on delta actions" in lines[0] and "action has 7 dims < 9" in lines[0], \
        r.stderr[-3000:]
    assert not os.path.exists(tmp_path / "out" / "checkpoints")


def _source_run(tmp_path, cfg, transforms):
    """A source directory with `transforms` in its policy.json and a fresh tiny π0 state saved as step 0, and
    a one-step SFT config from it (synchronous saves, no logs). -> (source dir, TrainConfig)."""
    import jax

    from vlajax.policies.run_files import init_fn
    from vlajax.training import checkpoint, sharding

    d = _source_dir(tmp_path / "src", cfg, transforms)
    mesh = sharding.make_mesh(cfg.mesh)
    state, _ = sharding.init_sharded(init_fn(cfg, ("agentview",)), mesh, cfg.mesh.logical_rules, jax.random.key(0))
    with checkpoint.Checkpointer(d, async_save=False) as ckpt:
        ckpt.save(0, state, extra={"step": 0}, force=True)
    return d, cfg.replace(output_dir=str(tmp_path / "ft"), compilation_cache_dir="",
                          data=dataclasses.replace(cfg.data, batch_size=jax.device_count()),  # the mesh's dp
                          sft=SFTConfig(init_from=d, num_steps=1, eval_every=-1),
                          checkpoint=dataclasses.replace(cfg.checkpoint, async_save=False),
                          logging=dataclasses.replace(cfg.logging, progress="none", tensorboard=False))


def test_sft_from_a_delta_policy_trains_on_deltas_and_keeps_the_mask(tokenizer, tmp_path):
    """`sft.train` from a source whose policy.json carries pi0_libero's transforms (weights: a fresh
    tiny π0 state, saved as a run step): one step; the run's policy.json keeps the transforms and the
    delta actions' statistics, and its Bridge turns a training target back into the dataset's actions."""
    from vlajax.sft.loop import train

    cfg = pi0_cfg(tokenizer)
    libero = OPENPI_CONFIGS["pi0_libero"].transforms
    d, run = _source_run(tmp_path, cfg, libero)
    out = train(run)
    assert out["steps"] == 1 and np.isfinite(out["final_loss"])
    bridge = Bridge.load(out["checkpoint_dir"])
    assert bridge.openpi == libero  # serving / eval apply AbsoluteActions on the same mask
    # the statistics openpi's compute_norm_stats computes (after DeltaActions), not meta/stats.json's
    # (in batches of the run's data.batch_size, as openpi's loader feeds them)
    _, info = make_loader(cfg.replace(data=run.data), None, delta_mask=libero.delta_mask, openpi_stats=True)
    for key in ("actions", "state"):
        for name in ("mean", "std", "q01", "q99"):
            np.testing.assert_allclose(getattr(bridge.norm[key], name), getattr(info.norm[key], name), rtol=1e-6)
    src = make_source(cfg)
    rec = src[3]
    x = Compose(info.transforms.inputs)(rec)  # the normalized delta target SFT trained on
    back = bridge.env_actions(jnp.asarray(x["actions"])[None], {"state": jnp.asarray(rec["state"])[None]})
    np.testing.assert_allclose(np.asarray(back)[0], rec["actions"], atol=2e-5)
    # resuming (a second step) after the source directory is gone: the run's own policy.json keeps the mask
    import shutil

    shutil.rmtree(d)
    out2 = train(run.replace(sft=dataclasses.replace(run.sft, num_steps=2)))
    assert out2["steps"] == 2
    assert Bridge.load(out2["checkpoint_dir"]).openpi == libero


@pytest.mark.parametrize("source", ["wide-mask", "aloha"])
def test_sft_delta_actions_off_trains_on_the_datasets_actions(tokenizer, tmp_path, source):
    """`sft.delta_actions='off'` from a source whose delta actions 'auto' refuses -- a mask the dataset
    cannot take (9 dims > its 7 actions), or openpi's ALOHA space (adapt_to_pi) -- trains (no refusal)
    on the dataset's actions and saves our own bridge (no openpi transforms): 'off' applies no delta, so
    the source's transforms are not read at all."""
    from vlajax.sft.loop import train

    cfg = pi0_cfg(tokenizer)
    if source == "aloha":
        transforms, refusal = OPENPI_CONFIGS["pi0_aloha"].transforms, "learned delta actions in openpi's ALOHA space"
    else:
        transforms = dataclasses.replace(OPENPI_CONFIGS["pi0_libero"].transforms, delta_mask=make_bool_mask(8, -1))
        refusal = "--sft.delta-actions off"
    _, run = _source_run(tmp_path, cfg, transforms)
    with pytest.raises(ConfigError, match=refusal):
        train(run)
    out = train(run.replace(sft=dataclasses.replace(run.sft, delta_actions="off")))
    assert out["steps"] == 1 and np.isfinite(out["final_loss"])
    bridge = Bridge.load(out["checkpoint_dir"])
    assert bridge.openpi is None
    _, info = make_loader(cfg, None)  # the dataset's own statistics, no delta
    np.testing.assert_allclose(bridge.norm["actions"].mean, info.norm["actions"].mean, rtol=1e-6)
