"""`python -m vlajax.bench fp8 --json PATH`: block-wise FP8 PTQ of the language tower.

Builds a preset model (default `small`), optionally fits it for a few flow-matching steps on a
fixed synthetic batch (so its actions depend on its weights), quantizes the language tower
(128x128 blocks, e4m3, fp32 scales; vision tower untouched), and reports:
  * parameter bytes before/after, per tower, and the fraction saved (of the language tower
    and of the whole model), both for the stored dtype and for a bfloat16 baseline;
  * max / mean absolute error of the quantized model's actions against the full-precision
    model's, on a fixed batch with the same sampler noise (deterministic ODE sampler).
With `--checkpoint DIR` (an SFT checkpoint directory) the trained weights are quantized
instead, and closed-loop success in the simulator is also measured before and after PTQ on the
checkpoint's task suite (`--episodes-per-task`, fixed seeds; weights dequantized from FP8).
Every figure is measured in this run.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vlajax.bench import write_result
from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.evaluation.closed_loop import evaluate
from vlajax.models import heads, presets, quantize
from vlajax.models.observation import fake_observation
from vlajax.models.vla import VLA
from vlajax.policies.run_files import load_policy
from vlajax.shared import cli


def _bf16_bytes(tree) -> dict[str, int]:
    """tower_bytes with every float32 leaf counted as bfloat16 (the usual stored dtype on GPU)."""
    def cast(x):
        if isinstance(x, quantize.QTensor) or x.dtype != jnp.float32:
            return x
        return jax.ShapeDtypeStruct(x.shape, jnp.bfloat16)

    return quantize.tower_bytes(jax.tree.map(cast, tree, is_leaf=lambda x: isinstance(x, quantize.QTensor)))


def _fit(model, params, obs, steps: int, lr: float):
    """A few Adam steps of flow matching towards actions that are a fixed function of the state."""
    cfg = model.cfg
    w = jax.random.normal(jax.random.key(123), (cfg.state_dim, cfg.action_horizon * cfg.action_dim))
    actions = jnp.tanh(obs.state @ w / np.sqrt(cfg.state_dim)).reshape(-1, cfg.action_horizon, cfg.action_dim)
    tx = optax.adam(lr)

    @jax.jit
    def step(params, opt, rng):
        loss, g = jax.value_and_grad(lambda p: heads.flow_loss(model, {"params": p}, obs, actions, rng)[0])(params)
        up, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, up), opt, loss

    opt, losses = tx.init(params), []
    for i in range(steps):
        params, opt, loss = step(params, opt, jax.random.key(i))
        losses.append(float(loss))
    return params, losses


def _load(ckpt_dir: str) -> dict:
    """Trained policy from an SFT checkpoint (see `vlajax.policies.run_files.load_policy`)."""

    bridge, model, params, train_cfg, step = load_policy(ckpt_dir, TrainConfig())
    return {"bridge": bridge, "model": model, "params": params, "train_cfg": train_cfg, "step": step}


def _success(trained: dict, params, params_hat, episodes_per_task: int) -> dict:
    """Closed-loop mean success of the full-precision and the PTQ weights on the same seeded episodes."""
    out = {}
    for name, p in (("full_precision", params), ("fp8_ptq", params_hat)):
        r = evaluate(trained["train_cfg"], trained["bridge"], trained["model"], p,
                     episodes_per_task=episodes_per_task, gifs=False)
        out[name] = {"mean_success": r["mean_success"], "per_task": r["per_task"], "episodes": r["episodes"]}
    out["change"] = out["fp8_ptq"]["mean_success"] - out["full_precision"]["mean_success"]
    return out


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: pathlib.Path | None = None  # write the results here
    preset: str = "small"  # model preset (vlajax.models.presets)
    batch: int = 8  # fixed evaluation batch
    fit_steps: int = 30  # flow-matching steps before quantizing (0 = random init)
    lr: float = 1e-3
    seed: int = 0
    checkpoint: str = ""  # SFT checkpoint dir: quantize its weights, measure success
    episodes_per_task: int = 10  # with --checkpoint: eval episodes per task


def main(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog="python -m vlajax.bench fp8", description=__doc__.split("\n\n")[0])

    t0 = time.perf_counter()
    trained = None
    try:
        if args.checkpoint:
            trained = _load(args.checkpoint)
            model, params = trained["model"], trained["params"]
            cfg = model.cfg
        else:
            cfg = presets.get_model_config(args.preset, flow_sampler="ode", action_head="flow")
            model = VLA(cfg)
    except (ConfigError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cameras = trained["bridge"].cameras if trained else None
    obs = fake_observation(jax.random.key(args.seed), args.batch, cfg, cameras)
    losses: list[float] = []
    if trained is None:
        params = jax.jit(model.init)(jax.random.key(args.seed + 1), obs)["params"]
        params, losses = _fit(model, params, obs, args.fit_steps, args.lr)

    qparams = jax.jit(quantize.quantize_params)(params)
    def sample(p, o, r):
        v = {"params": quantize.dequantize_params(p)}
        if cfg.action_head == "flow":
            return heads.flow_sample(model, v, o, r, sampler="ode")
        return heads.token_sample(model, v, o, r, temperature=0.0)

    sample = jax.jit(sample)
    rng = jax.random.key(args.seed + 2)
    full = np.asarray(sample(params, obs, rng).actions)
    quant = np.asarray(sample(qparams, obs, rng).actions)
    err = np.abs(full - quant)

    before, after = quantize.tower_bytes(params), quantize.tower_bytes(qparams)
    b16_before, b16_after = _bf16_bytes(params), _bf16_bytes(qparams)
    n_q = sum(isinstance(x, quantize.QTensor)
              for x in jax.tree.leaves(qparams, is_leaf=lambda x: isinstance(x, quantize.QTensor)))
    result = {
        "benchmark": "fp8_ptq",
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "preset": args.preset,
        "param_dtype": cfg.param_dtype,
        "parameters": presets.param_count({"params": params}),
        "quantization": {"block": [quantize.BLOCK, quantize.BLOCK], "dtype": "float8_e4m3fn",
                         "scale": "float32 per block", "groups": list(quantize.LANGUAGE_TOWER),
                         "quantized_tensors": n_q},
        "bytes_before": before,
        "bytes_after": after,
        "fraction_saved_language": 1 - after["language"] / before["language"],
        "fraction_saved_total": 1 - after["total"] / before["total"],
        "bf16_baseline": {
            "bytes_before": b16_before,
            "bytes_after": b16_after,
            "fraction_saved_language": 1 - b16_after["language"] / b16_before["language"],
            "fraction_saved_total": 1 - b16_after["total"] / b16_before["total"],
        },
        "fit": {"steps": args.fit_steps, "lr": args.lr, "loss_first": losses[0] if losses else None,
                "loss_last": losses[-1] if losses else None},
        "actions": {"batch": args.batch, "sampler": "ode", "num_denoise_steps": cfg.num_denoise_steps,
                    "shape": list(full.shape), "max_abs_error": float(err.max()),
                    "mean_abs_error": float(err.mean()), "mean_abs_action": float(np.abs(full).mean())},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if trained is not None:
        result["preset"] = trained["train_cfg"].name
        result["checkpoint"] = {"dir": args.checkpoint, "step": trained["step"]}
        result["fit"] = None
        result["actions"]["sampler"] = "ode" if cfg.action_head == "flow" else "argmax tokens"
        result["success"] = _success(trained, params, quantize.dequantize_params(qparams), args.episodes_per_task)
        result["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result, indent=2))
    write_result(args.json, result)
    return 0
