"""Why does an SFT policy fail on the `object` suite? Probes of a trained checkpoint and of the cameras.

1. inputs   Which inputs does the policy read? The training loss (`vlajax.sft.loop.loss_fn`, same
            flow-matching noise) on batches of its dataset, real and with one input taken from
            another sample of the batch (a cyclic shift): both images, one camera, the
            instruction tokens, the whole proprio state, or one group of its dims (ee xyz,
            fingers, ee velocity). An input the policy ignores leaves the loss unchanged.
            `loss` is the action loss alone; a policy trained with `model.aux_target` also gets
            `aux_target_mse` (its prefix's error on the normalized target; 1.0 = predicting the
            mean) per variant: swapping the instruction raises it when the prefix reads the colour word.
            `--aux-frames pregrasp|start`: that error on the frames before the episode's grasp only,
            or on its first frames (fingertips within 2 cm of the start), where the gripper does
            not yet show where the target is.
2. descent  Where does the gripper go? Closed loop as `vlajax.evaluation.closed_loop` runs it (deterministic,
            replan 4; its episode seeds), on a chosen eval seed: the fingertips' xy the first
            time they go below 4 cm (a grasp attempt), the nearest cube there (the target, a
            distractor, none within 3 cm), the correlation of that xy with the target's initial
            xy, and success.

3. text     (no checkpoint) Instruction lengths in tokens of the packaged tokenizer (bos and eos
            included) against `max_text_len` 16 of `sft-small`, per task.
4. pixels   (no checkpoint) How many pixels does the target cube cover in each camera at reset,
            at 32 and 64 px? It is rendered twice, once recoloured, and the differing pixels counted.

    .venv/bin/python experiments/object_suite_probes.py --probes text pixels --json runs/issue22/scene.json
    .venv/bin/python experiments/object_suite_probes.py --checkpoint runs/issue22/e1/ck2000 \\
        --dataset runs/issue22/demos100 --json runs/issue22/probes-e1.json

Use an eval seed other than the suite's standard one (0) for the descent probe (default 11).
`--debug`: 2 batches, 1 episode per task, 4 resets (a wiring check).
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

STATE_GROUPS = {"ee_xyz": [0, 1, 2], "fingers": [3, 4], "ee_velocity": [5, 6, 7]}


def input_probe(ckpt: str, dataset: str, batches: int, aux_frames: str = "") -> dict:
    from vlajax.config.schema import TrainConfig
    from vlajax.data.build import make_loader
    from vlajax.models.build import build_model
    from vlajax.models.vla import VLA
    from vlajax.policies.run_files import load_policy
    from vlajax.sft.loop import loss_fn, sample_cache

    _, _, params, tcfg, step = load_policy(ckpt, TrainConfig())
    if aux_frames and tcfg.model.aux_target != "none":  # the aux error on those frames only
        tcfg = tcfg.replace(model=dataclasses.replace(tcfg.model, aux_target=f"grasp_place_{aux_frames}"))
    model = build_model(tcfg.model)
    cfg = dataclasses.replace(tcfg, data=dataclasses.replace(tcfg.data, dataset_dir=dataset, batching="fixed",
                                                             shuffle_seed=123))
    loader, info = make_loader(cfg, None, train=False)
    def _losses(p, b, r):
        _, m = loss_fn(p, model, b, r, info.groups)
        out = {k: m[k] for k in ("flow_mse", "token_ce", "aux_target_mse") if k in m}
        if "aux_target_mse" in m:  # per target dim (grasp_place: grasp x, y, place x, y)
            cache, hidden = sample_cache(model, {"params": p}, b, info.groups, with_hidden=True)
            pred = model.apply({"params": p}, hidden, cache.segment_ids > 0, method=VLA.aux_target)
            live = ((b["sample_mask"] > 0) & (b["aux_frame_weight"] > 0))[:, None]  # counted frames, once each
            out["aux_per_dim"] = jnp.sum(live * (pred - b["aux_target"]) ** 2, 0) / jnp.maximum(live.sum(), 1)
        return out

    loss = jax.jit(_losses)
    acc: dict[str, list[float]] = {}
    aux: dict[str, list[float]] = {}
    aux_dims: dict[str, list] = {}
    for i in range(batches):
        b = next(loader)
        rng = jax.random.key(i)
        perm = np.roll(np.arange(len(b["sample_mask"])), 1)
        sw = lambda x, perm=perm: np.asarray(x)[perm]  # noqa: E731
        variants = {
            "real": b,
            "images_swapped": {**b, "images": {c: sw(v) for c, v in b["images"].items()}},
            **{f"{cam}_swapped": {**b, "images": {c: sw(v) if c == cam else v for c, v in b["images"].items()}}
               for cam in b["images"]},
            "text_swapped": {**b, "tokens": sw(b["tokens"]), "token_mask": sw(b["token_mask"])},
        }
        if tcfg.model.use_state_token:
            variants["state_swapped"] = {**b, "state": sw(b["state"])}
            for name, dims in STATE_GROUPS.items():
                s = np.array(b["state"])
                s[:, dims] = sw(s)[:, dims]
                variants[f"state_{name}_swapped"] = {**b, "state": s}
        for k, v in variants.items():
            m = loss(params, v, rng)
            acc.setdefault(k, []).append(float(m.get("flow_mse", m.get("token_ce"))))
            if "aux_target_mse" in m:
                aux.setdefault(k, []).append(float(m["aux_target_mse"]))
                aux_dims.setdefault(k, []).append(np.asarray(m["aux_per_dim"]))
    out = {"step": step, "batches": batches, "loss": {k: round(float(np.mean(v)), 4) for k, v in acc.items()}}
    if aux:
        out["aux_target_mse"] = {k: round(float(np.mean(v)), 4) for k, v in aux.items()}
        out["aux_target_mse_per_dim"] = {k: np.round(np.mean(v, 0), 4).tolist() for k, v in aux_dims.items()}
    return out


def descent_probe(ckpt: str, seed: int, episodes: int, replan: int) -> dict:
    from vlajax.config.schema import TrainConfig
    from vlajax.data.demos import make_env
    from vlajax.envs import registry
    from vlajax.evaluation.closed_loop import episode_keys
    from vlajax.policies.run_files import load_policy

    bridge, model, params, tcfg, step = load_policy(ckpt, TrainConfig())
    cfg = dataclasses.replace(tcfg, env=dataclasses.replace(tcfg.env, suite="object", task=""))
    names = registry.tasks_for(cfg.env)
    env = make_env(cfg, names[0])
    tids = np.asarray([registry.ALL_ENVS.index(n) for n in names], np.int32)
    keys = episode_keys(seed, tids, episodes)
    length = cfg.env.episode_length

    def run(params, keys, task_ids):
        state = jax.vmap(lambda k, t: env.reset_task(k, t))(keys, task_ids)
        vstep = jax.vmap(env.step)

        def control(carry, act):
            state, done = carry
            nxt = vstep(state, act)
            keep = lambda new, old: jnp.where(done.reshape(done.shape + (1,) * (new.ndim - 1)), old, new)  # noqa: E731
            nxt = jax.tree.map(keep, nxt, state)
            done = done | (nxt.metrics["success"] > 0)
            ee, _, cubes, _, _, _ = jax.vmap(env._parts)(nxt.data)
            return (nxt, done), (ee, cubes, done)

        def chunk(carry, i):
            acts = bridge.act(model, {"params": params}, carry[0], jax.random.fold_in(jax.random.key(0), i),
                              deterministic=True)
            return jax.lax.scan(control, carry, jnp.moveaxis(acts[:, :replan], 1, 0))

        _, out = jax.lax.scan(chunk, (state, jnp.zeros(keys.shape[0], bool)), jnp.arange(length // replan))
        return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), out)

    t0 = time.time()
    ee, cubes, done = jax.device_get(jax.jit(run)(params, keys, jnp.asarray(np.repeat(tids, episodes))))
    n = ee.shape[1]
    modes = {"target": 0, "distractor": 0, "none": 0, "never_down": 0}
    descent, target = [], []
    for e in range(n):
        low = np.flatnonzero(ee[:, e, 2] < 0.04)
        if not len(low):
            modes["never_down"] += 1
            continue
        t = low[0]
        d = np.linalg.norm(cubes[t, e, :, :2] - ee[t, e, :2], axis=-1)
        k = int(np.argmin(d))
        modes["none" if d[k] > 0.03 else ("target" if k == 0 else "distractor")] += 1
        descent.append(ee[t, e, :2])
        target.append(cubes[0, e, 0, :2])
    descent, target = np.asarray(descent), np.asarray(target)
    corr = [float(np.corrcoef(descent[:, i], target[:, i])[0, 1]) if len(descent) > 2 else None for i in range(2)]
    succ = done[-1]
    return {"step": step, "eval_seed": seed, "episodes": int(n), "replan": replan, "first_descent": modes,
            "corr_descent_target_xy": corr,
            "median_xy_error_m": float(np.median(np.linalg.norm(descent - target, axis=1))) if len(descent) else None,
            "target_lifted": float((cubes[:, :, 0, 2] > 0.05).any(0).mean()), "success": float(succ.mean()),
            "per_task_success": {nm: float(succ[i * episodes:(i + 1) * episodes].mean()) for i, nm in enumerate(names)},
            "seconds": round(time.time() - t0, 1)}


def text_probe(max_len: int = 16) -> dict:
    from vlajax.envs.tabletop import tasks
    from vlajax.models.tokenizer import decode, encode

    out = {}
    for t in tasks.TASKS:
        texts = t.instructions()[: tasks.NUM_INSTRUCTIONS]
        lengths = [int(encode(x, 256)[1].sum()) for x in texts]
        out[t.name] = {"tokens_min": min(lengths), "tokens_max": max(lengths), "cut_at_max_len": max(lengths) > max_len,
                       "example": texts[0], f"example_at_{max_len}": decode(encode(texts[0], max_len)[0])}
    return {"max_text_len": max_len, "tasks": out}


def pixel_probe(resets: int, sizes=(32, 64)) -> dict:
    from vlajax.envs import registry

    out = {}
    for size in sizes:
        env = registry.load("object/pick_red", image_size=size)

        def covered(key, env=env):
            st = env.reset(key)
            ep = st.info["episode"]
            a = env.render(st.data, ep)
            rgba = ep["geom_rgba"].at[env.idx.cube_geom[0], :3].set(jnp.array([0.0, 1.0, 1.0]))
            b = env.render(st.data, {**ep, "geom_rgba": rgba})
            return {c: jnp.sum(jnp.any(a[c] != b[c], -1)) for c in a}

        px = jax.device_get(jax.jit(jax.vmap(covered))(jax.random.split(jax.random.key(3), resets)))
        out[str(size)] = {c: {"mean": round(float(np.mean(v)), 1), "min": int(np.min(v)), "max": int(np.max(v)),
                              "resets_at_most_2px": int(np.sum(np.asarray(v) <= 2))} for c, v in px.items()}
    return {"resets": resets, "target_cube_pixels": out}


@dataclasses.dataclass(frozen=True)
class Args:
    checkpoint: str = ""  # the probed policy (inputs, descent)
    dataset: str = ""  # the LeRobot dataset of the input probe
    resets: int = 200  # pixels probe: random resets
    eval_seed: int = 11
    episodes_per_task: int = 10
    batches: int = 12
    replan: int = 4
    probes: tuple[Literal["inputs", "descent", "text", "pixels"], ...] = ("inputs", "descent")
    json: str = ""  # write the result here too
    aux_frames: Literal["", "pregrasp", "start"] = ""  # inputs probe of a model.aux_target policy: these frames only
    debug: bool = False  # 2 batches, 1 episode per task, 4 resets (a wiring check)


def main(argv: list[str] | None = None) -> int:
    from vlajax.shared import cli

    a = cli.parse(Args, argv, prog="experiments/object_suite_probes.py", description=__doc__.splitlines()[0])
    if a.debug:
        a = dataclasses.replace(a, batches=2, episodes_per_task=1, resets=4)
    if {"inputs", "descent"} & set(a.probes) and not (a.checkpoint and a.dataset):
        cli.error("the inputs and descent probes need --checkpoint and --dataset")
    out: dict = {"checkpoint": a.checkpoint, "dataset": a.dataset}
    if "text" in a.probes:
        out["text"] = text_probe()
    if "pixels" in a.probes:
        out["pixels"] = pixel_probe(a.resets)
    if "inputs" in a.probes:
        out["inputs"] = input_probe(a.checkpoint, a.dataset, a.batches, a.aux_frames)
    if "descent" in a.probes:
        out["descent"] = descent_probe(a.checkpoint, a.eval_seed, a.episodes_per_task, a.replan)
    text = json.dumps(out, indent=1)
    print(text, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
