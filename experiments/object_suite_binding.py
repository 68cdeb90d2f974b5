"""Can the VLA's prefix bind the colour word to the named cube's place? A supervised probe.

Data: first frames of object-suite scenes (gripper at home: nothing but the scene and the
instruction says where the target is), each scene three times, once with each of its cubes as
the target (`vlajax.data.demos.swap_target`: same picture, the instruction names another colour).
So the picture alone cannot give the target; a model that ignores the instruction can at best
predict the mean of the scene's three cubes (`scene_mean` baseline, printed).

Model: `sft-small`'s VLA (or `--patch-size` / `--image-size` variants): vision tower, text
embedding and prefix transformer, then the `aux_target` head (attention pooling + MLP) trained
alone (MSE, AdamW) to predict the target cube's xy (normalized over the training scenes).
Reported on held-out scenes (another seed): the normalized MSE with the real instruction and
with the instructions shifted across the batch (another sample's colour word), every
`--every` steps, and the fraction of held-out frames whose prediction is nearest to the named
cube (`nearest_ok`; 1/3 = chance).

    .venv/bin/python experiments/object_suite_binding.py --scenes 400 --steps 1500 --json runs/issue22/binding.json

`--save-init DIR` makes the trained prefix the start of an SFT run (`--sft.init-from DIR`, with
`--model.aux-target grasp_place` and the same `--model.[no-]use-state-token` and
`--model.[no-]target-conditioning`): a grounding stage before behaviour cloning.

`--debug`: 12 scenes, 4 steps (a wiring check).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np


def first_frames(num_scenes: int, seed: int, image_size: int, batch: int = 48) -> dict[str, np.ndarray]:
    """num_scenes x 3 first frames (`vlajax.data.demos.first_frames`, scene s from `fold_in(key(seed), s)`):
    images {camera: uint8 [M, H, W, 3]} as top-level keys, texts [M], target xy [M, 2], cube xy [M, 3, 2]
    (cube 0 = the target), square xy [M, 2], scene index [M]; M = 3 * num_scenes."""
    from vlajax.data.demos import first_frames as render
    from vlajax.envs import registry

    env = registry.load("object/pick_red", {"image_size": image_size, "cameras": ("agentview", "wrist")})
    d = render(env, num_scenes, jax.random.key(seed), batch)
    return {**d["images"], "texts": d["instructions"], "cubes": d["cubes"], "zone": d["zone"],
            "scene": d["scene"], "target": d["cubes"][:, 0]}


@dataclasses.dataclass(frozen=True)
class Args:
    scenes: int = 400  # training scenes (each x 3 target swaps)
    heldout_scenes: int = 100  # held-out scenes (another seed)
    steps: int = 1500
    every: int = 250  # report every this many steps
    batch_size: int = 32
    lr: float = 5e-4
    image_size: int = 32
    patch_size: int = 8
    vision_stem: Literal["patch", "conv"] = "patch"  # model.vision_stem: linear patch embedding or a conv stem
    cameras: tuple[str, ...] = ("agentview", "wrist")
    seed: int = 0
    state_token: bool = False  # the model has the state token (fed zeros here)
    # build the model with `model.target_conditioning` (its `target_in` projection is initialized, not trained
    # here), so that --save-init feeds an SFT run with --model.target-conditioning
    target_conditioning: bool = False
    with_square: bool = False  # also train the square's xy (aux dims 2-3, as grasp_place's place xy); reported: 0-1
    # `model.aux_grasp_bins`: the target xy as a K x K classification (cross-entropy, `vlajax.models.vla.aux_loss`)
    # instead of a regression; 0 = MSE
    aux_grasp_bins: int = 0
    # write an `sft.init_from` source here: config.json (sft-small, object suite, this model), policy.json, and an
    # Orbax step holding the trained params
    save_init: str = ""
    json: str = ""  # write the result here too
    debug: bool = False  # 12 scenes, 4 steps (a wiring check)


def main(argv=None) -> int:
    from vlajax.shared import cli

    a = cli.parse(Args, argv, prog="experiments/object_suite_binding.py", description=__doc__.split("\n")[0])
    if a.debug:
        a = dataclasses.replace(a, scenes=12, heldout_scenes=12, steps=4, every=2)
    import optax

    from vlajax.config.presets.sft import SMALL_CPU_MODEL
    from vlajax.config.schema import ConfigError
    from vlajax.models.observation import Observation
    from vlajax.models.tokenizer import encode_batch
    from vlajax.models.vla import VLA, aux_loss

    try:  # ModelConfig's own checks (e.g. --aux-grasp-bins 1), before any data is made
        mcfg = dataclasses.replace(SMALL_CPU_MODEL, image_size=a.image_size, patch_size=a.patch_size,
                                   vision_stem=a.vision_stem,
                                   aux_target="grasp_place", use_state_token=a.state_token,
                                   target_conditioning=a.target_conditioning, aux_grasp_bins=a.aux_grasp_bins)
    except ConfigError as e:
        cli.error(str(e))
    t0 = time.time()
    train = first_frames(a.scenes, 1000 + a.seed, a.image_size)
    held = first_frames(a.heldout_scenes, 5000 + a.seed, a.image_size)
    t_data = time.time() - t0
    mu, sd = train["target"].mean(0), train["target"].std(0)
    norm = lambda xy: (xy - mu) / sd
    zmu, zsd = train["zone"].mean(0), train["zone"].std(0)
    dims = 4 if a.with_square else 2
    labels = lambda d: np.concatenate([norm(d["target"]), (d["zone"] - zmu) / zsd], 1)[:, :dims]

    model = VLA(mcfg)
    tmax = mcfg.max_text_len

    def to_obs(d, idx, text_shift=0):
        texts = [d["texts"][j] for j in np.roll(idx, text_shift)]
        ids, mask = encode_batch(texts, tmax)
        b = len(idx)
        return Observation(images={c: jnp.asarray(d[c][idx], jnp.float32) / 255.0 for c in a.cameras},
                           image_masks={c: jnp.ones((b,), bool) for c in a.cameras},
                           tokens=jnp.asarray(ids), token_mask=jnp.asarray(mask), state=jnp.zeros((b, 8)))

    def head(params, obs, method):
        hidden, cache = model.apply({"params": params}, obs, method=VLA.prefix)
        return model.apply({"params": params}, hidden, cache.segment_ids > 0, method=method)

    def predict(params, obs):
        return head(params, obs, VLA.aux_target)[:, :dims]

    def loss(params, obs, y):  # the MSE, or with --aux-grasp-bins the bins' cross-entropy (+ square MSE)
        return aux_loss(mcfg, head(params, obs, VLA.aux_raw), y, jnp.ones(y.shape[0]))[0]

    params = model.init(jax.random.key(a.seed), to_obs(train, np.arange(2)))["params"]
    sched = optax.warmup_cosine_decay_schedule(0.0, a.lr, min(100, a.steps // 2), a.steps, a.lr * 0.05)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=1e-4))
    opt_state = opt.init(params)

    @jax.jit
    def step(params, opt_state, obs, y):
        lv, g = jax.value_and_grad(loss)(params, obs, y)
        upd, opt_state = opt.update(g, opt_state, params)
        return optax.apply_updates(params, upd), opt_state, lv

    pred_j = jax.jit(predict)

    # text-blind baseline: each held-out frame predicted by its scene's mean cube position
    scene_mean = norm(held["cubes"].mean(1))
    baseline = float(np.mean((scene_mean - norm(held["target"])) ** 2))

    def evaluate(params):
        n = len(held["texts"])
        out = {}
        for name, shift in (("real", 0), ("text_shifted", 1)):
            preds = []
            for s in range(0, n, a.batch_size):
                idx = np.arange(s, min(n, s + a.batch_size))
                preds.append(np.asarray(pred_j(params, to_obs(held, idx, shift))))
            p = np.concatenate(preds)[:, :2]
            out[f"mse_{name}"] = float(np.mean((p - norm(held["target"])) ** 2))
            if name == "real":
                d = np.linalg.norm(norm(held["cubes"]) - p[:, None], axis=-1)  # [M, 3]
                out["nearest_ok"] = float(np.mean(np.argmin(d, 1) == 0))
        return out

    rng = np.random.default_rng(a.seed)
    n_train = len(train["texts"])
    history = []
    t1 = time.time()
    losses = []
    for i in range(1, a.steps + 1):
        idx = rng.choice(n_train, a.batch_size, replace=False)
        params, opt_state, lv = step(params, opt_state, to_obs(train, idx), jnp.asarray(labels(train)[idx]))
        losses.append(float(lv))
        if i % a.every == 0 or i == a.steps:
            name = "train_ce" if a.aux_grasp_bins else "train_mse"
            ev = {"step": i, name: float(np.mean(losses[-a.every:])), **evaluate(params),
                  "seconds": round(time.time() - t1, 1)}
            history.append(ev)
            print(json.dumps(ev), flush=True)
    result = {"args": vars(a), "scene_mean_baseline_mse": baseline, "data_seconds": round(t_data, 1),
              "train_frames": n_train, "heldout_frames": len(held["texts"]), "history": history,
              "example_texts": train["texts"][:6]}
    print(json.dumps({k: v for k, v in result.items() if k != "history"}), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    if a.save_init:
        save_init(a.save_init, mcfg, params, a.steps, a.seed)
    return 0


def save_init(directory: str, mcfg, params, step: int, seed: int) -> None:
    """An `sft.init_from` source at `directory`: `sft-small` on the object suite with model `mcfg`,
    its train state (fresh optimizer) holding `params`, config.json and policy.json (placeholder
    normalization statistics: `init_from` reads only the cameras and the params)."""
    import os

    import flax.linen as nn

    from vlajax.config.schema import get_config
    from vlajax.data.normalize import NormStats
    from vlajax.policies.bridge import Bridge
    from vlajax.policies.run_files import init_fn, write_policy
    from vlajax.training import checkpoint

    cfg = get_config("sft-small")
    cfg = cfg.replace(model=mcfg, env=dataclasses.replace(cfg.env, suite="object"), seed=seed)
    cams = ("agentview", "wrist")
    state = nn.unbox(init_fn(cfg, cams)(jax.random.key(seed)))
    params = nn.unbox(params)  # model.init boxes the params (logical partitioning)
    flat = lambda t: {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_flatten_with_path(t)[0]}
    got = flat(params)
    assert set(got) == set(flat(state.params)), "probe params differ from the sft model's tree"
    state = state.replace(params=params, ema_params=None if state.ema_params is None else params)
    directory = os.path.abspath(directory)
    ones = lambda n: np.ones(n, np.float32)
    stats = lambda n: NormStats(0 * ones(n), ones(n), -ones(n), ones(n))
    write_policy(directory, cfg, Bridge(mcfg, cams, {"actions": stats(4), "state": stats(8)}), "sft")
    with checkpoint.Checkpointer(directory, async_save=False) as ck:
        ck.save(step, state, extra={"step": step, "config": "object_suite_binding"}, force=True)
    print(json.dumps({"saved_init": directory, "step": step}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
