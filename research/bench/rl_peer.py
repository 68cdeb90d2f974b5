"""Peer comparison: env steps/s of vlajax's synchronous PPO vs brax's PPO, side by side.

    python -m research.bench rl_peer --json results/bench/rl_peer.json [--iterations 6] [--rounds 5] [--debug]

One state-observation task (`rl-mlp-state`: goal/press_button, 32-dim privileged state, 4-dim
actions, episodes of 100 steps), the same env object for both (brax wraps it with its own
training wrappers: episode, vmap, auto-reset), and a matching network and batch:
- policy: MLP 64-64 tanh -> Gaussian mean, state-independent learned log-std, no squashing
  (brax `distribution_type='normal'`, `noise_std_type='log'`); value: MLP 64-64 tanh;
- 64 envs; each iteration collects 64 x 80 = 5120 env steps (vlajax: `rl.rollout_length=80`
  decisions of a 1-step chunk; brax: `batch_size=64` x `num_minibatches=4` unrolls of
  `unroll_length=20`), then 4 epochs x 4 minibatches of 1280 transitions, Adam, no observation
  normalization.
Throughput = env steps per second of training (collection + update) per iteration, with the
first iteration of each run (compilation) dropped; the two systems run in alternating rounds
(vlajax, brax, vlajax, brax, ...) so that both see the shared machine's load alike. The figure is
per round: `round_ratios[r]` = vlajax's median env steps/s in round r / brax's in round r (the two
runs next to each other in time), reported with their median and a 95% percentile-bootstrap
interval of that median (`vlajax.shared.stats.percentile_bootstrap`: rounds resampled with replacement, fixed seed);
the load average after each run is recorded beside it. The pooled medians over all measured
iterations (and the best iterations) are reported too. brax 0.14.2 calls
`jax.device_put_replicated`, removed in jax 0.12: the bench supplies jax's documented drop-in
for the duration of brax's run (brax is otherwise used unchanged). brax's own
`training/sps` is used for brax (its epochs here are one training step each); vlajax's is the
loop's `env_steps_per_s` (`vlajax.rl.loop.train`, the code path of `python -m vlajax.train rl`).
Both run in this one process, on the same devices.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import tempfile
import time

import jax
import numpy as np

from vlajax.bench import write_result
from vlajax.config.schema import CheckpointConfig, LoggingConfig, get_config
from vlajax.envs import registry
from vlajax.rl import loop
from vlajax.shared import cli, stats

NUM_ENVS, UNROLL, MINIBATCHES, EPOCHS, HIDDEN = 64, 20, 4, 4, (64, 64)


def _config(iterations: int, debug: bool):
    cfg = get_config("rl-mlp-state")
    envs, unroll = (8, 4) if debug else (NUM_ENVS, UNROLL)
    rl = dataclasses.replace(cfg.rl, num_iterations=iterations, rollout_length=unroll * MINIBATCHES,
                             num_minibatches=MINIBATCHES, update_epochs=EPOCHS, eval_every=0,
                             eval_episodes_per_task=1)
    return cfg.replace(
        env=dataclasses.replace(cfg.env, num_envs=envs, physics_impl="jax"), rl=rl,  # MJX: the env brax steps too
        model=dataclasses.replace(cfg.model, width=HIDDEN[0], depth=len(HIDDEN), action_horizon=1),
        checkpoint=CheckpointConfig(every_steps=10**9, async_save=False),
        logging=LoggingConfig(tensorboard=False, progress="none", every_steps=1),
    ), envs, unroll


def run_vlajax(cfg) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = loop.train(cfg.replace(output_dir=d))
    sps = [h["env_steps_per_s"] for h in out["history"]]
    return {"steps_per_s": statistics.median(sps[1:]), "per_iteration": sps,
            "env_steps_per_iteration": out["env_steps"] / len(sps), "params": out["params"]}


def _device_put_replicated(x, devices):
    """jax's documented drop-in for `jax.device_put_replicated` (removed in jax 0.12; brax 0.14.2 calls it)."""
    mesh = jax.sharding.Mesh(np.array(devices), ("d",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d"))
    return jax.tree.map(lambda a: jax.device_put(jax.numpy.stack([a] * len(devices)), sharding), x)


def run_brax(cfg, envs: int, unroll: int, iterations: int, on_progress=None) -> dict:
    """brax's PPO on the same env; `on_progress()` (optional) is called after every training epoch."""
    from brax.envs.wrappers import training as brax_wrappers
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo
    from flax import linen

    env = registry.load(cfg.env.task, obs_mode="state")
    steps_per_iteration = envs * unroll * MINIBATCHES
    factory = lambda obs_size, act_size, preprocess_observations_fn: ppo_networks.make_ppo_networks(
        obs_size, act_size, preprocess_observations_fn=preprocess_observations_fn,
        policy_hidden_layer_sizes=HIDDEN, value_hidden_layer_sizes=HIDDEN, activation=linen.tanh,
        distribution_type="normal", noise_std_type="log")
    progress = []
    shim = not hasattr(jax, "device_put_replicated")
    if shim:
        jax.device_put_replicated = _device_put_replicated
    try:
        _train_brax(ppo, brax_wrappers, env, factory, cfg, envs, unroll, iterations, steps_per_iteration, progress,
                    on_progress)
    finally:
        if shim:
            del jax.device_put_replicated
    sps = [float(m["training/sps"]) for m in progress if "training/sps" in m]
    return {"steps_per_s": statistics.median(sps[1:]), "per_iteration": sps,
            "env_steps_per_iteration": steps_per_iteration}


def _train_brax(ppo, brax_wrappers, env, factory, cfg, envs, unroll, iterations, steps_per_iteration, progress,
                on_progress=None):
    def progress_fn(step, metrics):
        progress.append(metrics)
        if on_progress is not None:
            on_progress()

    ppo.train(
        environment=env, wrap_env_fn=brax_wrappers.wrap, num_timesteps=iterations * steps_per_iteration,
        episode_length=cfg.env.episode_length, num_envs=envs, batch_size=envs, num_minibatches=MINIBATCHES,
        unroll_length=unroll, num_updates_per_batch=EPOCHS, learning_rate=cfg.rl.learning_rate,
        entropy_cost=cfg.rl.entropy_coef, discounting=cfg.rl.gamma, gae_lambda=cfg.rl.gae_lambda,
        clipping_epsilon=cfg.rl.clip_low, max_grad_norm=cfg.rl.grad_clip, normalize_observations=False,
        network_factory=factory, num_evals=iterations + 1, num_eval_envs=envs, run_evals=False,
        max_devices_per_host=1, seed=cfg.seed, progress_fn=progress_fn,
    )


def round_stats(runs: dict[str, list[dict]]) -> dict:
    """Per-round ratios vlajax / brax (each system's median post-compile env steps/s in that
    round), their median and its 95% bootstrap interval."""
    ratios = [v["steps_per_s"] / b["steps_per_s"] for v, b in zip(runs["vlajax"], runs["brax"], strict=True)]
    med, lo, hi = stats.percentile_bootstrap(ratios, np.median, seed=0)
    return {"round_ratios": ratios, "median_round_ratio": med, "ci95_round_ratio": [lo, hi],
            "bootstrap": {"resamples": stats.RESAMPLES, "confidence": stats.CONFIDENCE, "statistic": "median of rounds",
                          "seed": 0},
            "rounds_ratio_above_1": sum(r > 1 for r in ratios)}


def _combine(runs: list[dict]) -> dict:
    """Post-compile iterations of every round: median (the figure) and best (least disturbed)."""
    sps = [x for r in runs for x in r["per_iteration"][1:]]
    return {"steps_per_s": statistics.median(sps), "best_steps_per_s": max(sps), "iterations_measured": len(sps),
            "rounds": runs}


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: str = ""  # write the result here
    iterations: int = 6  # training iterations per system (first dropped)
    rounds: int = 5  # alternating rounds of (vlajax, brax)
    debug: bool = False  # 8 envs, unroll 4: a pulse check, not a measurement


def main(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog="python -m research.bench rl_peer", description=__doc__.split("\n")[0])
    if args.iterations < 2:
        cli.error("--iterations must be >= 2 (the first one is compilation)")
    cfg, envs, unroll = _config(args.iterations, args.debug)
    t0 = time.time()
    load_start = list(os.getloadavg())
    runs = {"vlajax": [], "brax": []}
    for r in range(args.rounds):  # alternate, so both systems see the machine's load alike
        for name, fn in (("vlajax", lambda: run_vlajax(cfg)), ("brax", lambda: run_brax(cfg, envs, unroll,
                                                                                          args.iterations))):
            t = time.time()
            res = fn()
            res.update(seconds=round(time.time() - t, 1), load_average_after=list(os.getloadavg()))
            runs[name].append(res)
            print(f"round {r} {name}", json.dumps(res), flush=True)
    v, b = (_combine(runs[k]) for k in ("vlajax", "brax"))
    stats = round_stats(runs)
    result = {
        "benchmark": "rl_peer", "task": cfg.env.task, "num_envs": envs, "unroll": unroll,
        "env_steps_per_iteration": envs * unroll * MINIBATCHES, "epochs": EPOCHS, "minibatches": MINIBATCHES,
        "hidden": list(HIDDEN), "iterations": args.iterations, "debug": args.debug,
        **stats,
        "vlajax": v, "brax": b, "ratio_vlajax_over_brax": v["steps_per_s"] / b["steps_per_s"],
        "ratio_of_best_iterations": v["best_steps_per_s"] / b["best_steps_per_s"], "rounds": args.rounds,
        "devices": [str(d) for d in jax.devices()], "load_average_start": load_start,
        "load_average": list(os.getloadavg()),
        "seconds": round(time.time() - t0, 1),
        "command": "python -m research.bench rl_peer " + " ".join(argv),
    }
    print(json.dumps({k: result[k] for k in ("round_ratios", "median_round_ratio", "ci95_round_ratio",
                                             "ratio_vlajax_over_brax", "ratio_of_best_iterations")}, indent=1))
    write_result(args.json, result)
    return 0
