"""A probe of a `model.target_conditioning` policy in closed loop on the object suite.

For each episode (as `vlajax.evaluation.closed_loop` runs it: deterministic ODE, `--replan` actions per chunk)
it records the model's predicted target (grasp xy, place xy; de-normalized with the training
demos' statistics) at the first chunk against the scene (cube 0 is the named target; the zone
centre), which cube the predicted grasp is nearest to, and success. `--oracle` runs the same
episodes with the action head conditioned on the true target instead (the named cube's initial
xy and the zone centre, normalized like the training targets): the gap between the two is what
the prediction's error costs, the oracle's own failures what the action head cannot do.
`--hold-first` conditions every chunk on the prediction made at the first chunk (gripper at home)
instead of re-predicting at each chunk: whether re-predicting drifts along the gripper's path.
`--target-from CKPT` conditions the action head on another checkpoint's predicted target (its prefix and
aux head, same demos' normalization), re-predicted at each chunk: what the checkpoint's action head
achieves with a separate target predictor (e.g. one whose VLM stayed the grounding's).

    .venv/bin/python experiments/object_suite_target_probe.py --checkpoint runs/i22t/d1/checkpoints \
        --eval-seed 7 --episodes-per-task 10 --json out.json [--oracle]

Use an eval seed other than the suite's standard one (0).
"""

from __future__ import annotations

import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import numpy as np


def raw_targets(cfg) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std [4] of the training demos' raw grasp/place xy (`grasp_place_targets`' normalization)."""
    from vlajax.data.build import make_source
    from vlajax.data.source import grasp_place_raw, grasp_place_stats

    return grasp_place_stats(grasp_place_raw(make_source(cfg))[0])


def probe(ckpt: str, seed: int, episodes: int, replan: int, oracle: bool, hold_first: bool = False,
          target_from: str = "") -> dict:
    from vlajax.config.schema import TrainConfig
    from vlajax.data.demos import make_env
    from vlajax.envs import registry
    from vlajax.evaluation.closed_loop import episode_keys
    from vlajax.models.vla import VLA
    from vlajax.policies.run_files import load_policy

    bridge, model, params, tcfg, step = load_policy(ckpt, TrainConfig())
    if not model.cfg.target_conditioning:
        raise SystemExit("error: the checkpoint's model has no target_conditioning")
    mean, std = (jnp.asarray(x, jnp.float32) for x in raw_targets(tcfg))
    if target_from:
        if oracle:
            raise SystemExit("error: --target-from and --oracle exclude each other")
        from vlajax.data.lerobot import DatasetError

        t_bridge, t_model, t_params, t_cfg, _ = load_policy(target_from, TrainConfig())
        try:
            t_stats = raw_targets(t_cfg)
        except DatasetError as e:  # e.g. a grounding's directory: its config names no demos
            raise SystemExit(f"error: --target-from {target_from}: its training demos are not readable ({e}); "
                             "it needs a checkpoint trained on demos (an SFT run)") from None
        same = t_model.cfg.aux_target == model.cfg.aux_target and all(
            np.allclose(x, y) for x, y in zip(t_stats, (mean, std)))
        if not same:
            raise SystemExit("error: --target-from needs a checkpoint with the same aux_target, trained on demos with "
                             "the same target statistics")
    cfg = dataclasses.replace(tcfg, env=dataclasses.replace(tcfg.env, suite="object", task=""))
    names = registry.tasks_for(cfg.env)
    env = make_env(cfg, names[0])
    tids = np.asarray([registry.ALL_ENVS.index(n) for n in names], np.int32)
    keys = episode_keys(seed, tids, episodes)
    length, K = cfg.env.episode_length, model.cfg.num_denoise_steps
    mc = model.cfg

    def prefix_and_target(m, v, br, state):
        """The prefix's KV cache and the model's predicted target [B, 4] (normalized) for env `state`."""
        hidden, cache = m.apply(v, br.observation_from_state(state), method=VLA.prefix)
        return cache, m.apply(v, hidden, cache.segment_ids > 0, method=VLA.predicted_target)

    def act(params, state, true_target, held, first, rng):
        v = {"params": params}
        cache, pred = prefix_and_target(model, v, bridge, state)
        if target_from:
            pred = prefix_and_target(t_model, {"params": t_params}, t_bridge, state)[1]
        b = true_target.shape[0]
        target = (true_target - mean) / std if oracle else pred
        if hold_first and not oracle:
            target = jnp.where(first, pred, held)
        x = jax.random.normal(rng, (b, mc.action_horizon, mc.action_dim)) if mc.flow_x1 == "normal" else \
            jnp.zeros((b, mc.action_horizon, mc.action_dim))
        for k in range(K):  # the ODE sampler of heads.flow_sample (x_{t-d} = x_t - d v)
            v_, _, _ = model.apply(v, cache, x, jnp.full((b,), 1.0 - k / K), method=VLA.velocity, target=target)
            x = x - v_ / K
        return bridge.env_actions(x), pred * std + mean, target

    def run(params, keys, task_ids):
        state = jax.vmap(lambda k, t: env.reset_task(k, t))(keys, task_ids)
        _, _, cubes0, zone, _, _ = jax.vmap(env._parts)(state.data)
        true_target = jnp.concatenate([cubes0[:, 0, :2], zone], axis=-1)
        vstep = jax.vmap(env.step)

        def control(carry, a):
            state, done = carry
            nxt = vstep(state, a)
            keep = lambda new, old: jnp.where(done.reshape(done.shape + (1,) * (new.ndim - 1)), old, new)  # noqa: E731
            nxt = jax.tree.map(keep, nxt, state)
            return (nxt, done | (nxt.metrics["success"] > 0)), None

        def chunk(carry, i):
            env_carry, held = carry
            acts, pred, used = act(params, env_carry[0], true_target, held, i == 0,
                                   jax.random.fold_in(jax.random.key(0), i))
            env_carry, _ = jax.lax.scan(control, env_carry, jnp.moveaxis(acts[:, :replan], 1, 0))
            return (env_carry, used), pred

        init = ((state, jnp.zeros(keys.shape[0], bool)), jnp.zeros((keys.shape[0], 4), jnp.float32))
        ((_, done), _), preds = jax.lax.scan(chunk, init, jnp.arange(length // replan))
        return done, preds, cubes0, zone

    t0 = time.time()
    done, preds, cubes, zone = jax.device_get(jax.jit(run)(params, keys, jnp.asarray(np.repeat(tids, episodes))))
    first = preds[0]  # [E, 4] at the first chunk (gripper at home)
    d = np.linalg.norm(cubes[:, :, :2] - first[:, None, :2], axis=-1)  # [E, 3]
    nearest = np.argmin(d, axis=1)
    n = len(done)
    return {
        "step": step, "eval_seed": seed, "episodes": n, "replan": replan, "oracle": oracle, "hold_first": hold_first,
        "target_from": target_from, "success": float(done.mean()),
        "per_task_success": {nm: float(done[i * episodes:(i + 1) * episodes].mean()) for i, nm in enumerate(names)},
        "first_chunk_grasp_nearest_is_target": float((nearest == 0).mean()),
        "first_chunk_grasp_error_m_median": float(np.median(d[:, 0])),
        "first_chunk_place_error_m_median": float(np.median(np.linalg.norm(first[:, 2:] - zone, axis=-1))),
        "success_when_first_grasp_nearest_target": float(done[nearest == 0].mean()) if (nearest == 0).any() else None,
        "success_when_not": float(done[nearest != 0].mean()) if (nearest != 0).any() else None,
        "seconds": round(time.time() - t0, 1),
    }


@dataclasses.dataclass(frozen=True)
class Args:
    checkpoint: str  # the policy's checkpoint directory (required)
    eval_seed: int = 7
    episodes_per_task: int = 10
    replan: int = 4
    oracle: bool = False  # condition on the true target instead of the prediction
    hold_first: bool = False  # condition every chunk on the first chunk's prediction (not with --oracle)
    target_from: str = ""  # checkpoint whose predicted target conditions the action head
    json: str = ""  # write the result here too


def main(argv: list[str] | None = None) -> int:
    from vlajax.shared import cli

    a = cli.parse(Args, argv, prog="experiments/object_suite_target_probe.py", description=__doc__.split("\n")[0])
    out = probe(a.checkpoint, a.eval_seed, a.episodes_per_task, a.replan, a.oracle, a.hold_first, a.target_from)
    out["command"] = "experiments/object_suite_target_probe.py " + " ".join(argv or __import__("sys").argv[1:])
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
