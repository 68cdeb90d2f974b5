"""How much of a stochastic policy's action spread its log-prob accounts for (RL with the flow head).

    .venv/bin/python experiments/flow_exploration.py --flow-from runs/s3/start-flow5-400 \
        --tokens-from runs/s3/start-tokmm5-500 [--json results/bench/flow_exploration.json]

Policy-gradient RL can only credit the randomness that the log-prob scores. For each SFT
checkpoint this takes `envs` goal-suite observations (balanced tasks, the first `decisions`
decisions of one stochastic rollout, every other one), draws `samples` action chunks per
observation from each sampler, and reports the spread of the *executed* env actions (the first
`chunk_steps` of the chunk, normalized action units, the policy's output space): the per-entry
standard deviation across samples, averaged over observations, steps and dims.

Flow head (`flow_sde` at `noise_level`), for x_1 ~ N(0, I) (`flow_x1='normal'`) and x_1 = 0:
  ode            the evaluation policy (its spread is all x_1's; the log-prob scores none of it)
  flow_sde one   one SDE step per chunk (`flow_sde_steps='one'`)
  flow_sde all   every denoising step an SDE step (`flow_sde_steps='all'`)
  flow_sde last  only the last step (`flow_sde_steps='last'`: its log-prob is the exact action density)
With x_1 ~ N(0, I) the uncredited share of the variance is about ode^2 / flow_sde^2.
Token head: sampling at temperature 1 (every bit of its spread is scored).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from vlajax.config.schema import get_config  # noqa: E402
from vlajax.models import heads  # noqa: E402
from vlajax.models.vla import VLA  # noqa: E402
from vlajax.rl import rollout as ro  # noqa: E402
from vlajax.rl import setup as rl_setup  # noqa: E402
from vlajax.shared import cli, compile_cache  # noqa: E402
from vlajax.training import sharding  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Probe:
    envs: int = 16  # goal-suite envs (4 per task)
    decisions: int = 8  # rollout decisions; every other one is probed -> envs * decisions / 2 observations
    samples: int = 16  # chunks drawn per observation
    seed: int = 0


def _setup(preset: str, init_from: str, probe: Probe, **model_overrides):
    cfg = get_config(preset)
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, init_from=init_from),
                              env=dataclasses.replace(cfg.env, num_envs=probe.envs),
                              model=dataclasses.replace(cfg.model, **model_overrides))
    mesh = sharding.make_mesh(cfg.mesh)
    setup = rl_setup.build(cfg, mesh)
    model_cfg, bridge, _ = rl_setup.load_sft(cfg, mesh)
    return cfg, setup, VLA(model_cfg), bridge, setup.init_params(jax.random.key(probe.seed))


def _observations(setup, params, probe: Probe):
    """Env observations [n, ...] and task ids [n] from one stochastic rollout of the policy."""
    key = jax.random.key(probe.seed)
    g = probe.envs // 4
    state = ro.reset(setup.env, ro.group_keys(key, probe.envs, g), ro.balanced_task_ids(setup.env, key, probe.envs, g))
    _, traj = jax.jit(lambda p, s: ro.rollout(setup.actor, setup.env, p, s, key, probe.decisions, 0, False))(
        params, state)
    obs = jax.tree.map(lambda x: x[::2].reshape((-1,) + x.shape[2:]), traj["obs"])
    return obs, traj["task_id"][::2].reshape(-1)


def _spread(model, bridge, params, obs, task_id, probe: Probe, chunk_steps: int, sampler=None) -> dict:
    """Std across `samples` draws of the executed env actions [n, S, k, A_env] -> summary."""
    o = jax.tree.map(lambda x: jnp.repeat(x, probe.samples, axis=0), bridge.observation(obs, task_id))

    @jax.jit
    def draw(p, o, key):
        if model.cfg.action_head == "flow":
            return heads.flow_sample(model, {"params": p}, o, key, sampler=sampler).actions
        return heads.token_sample(model, {"params": p}, o, key, temperature=1.0).actions

    a = np.asarray(draw(params, o, jax.random.key(probe.seed + 1)))[:, :chunk_steps, :bridge.env_action_dim]
    a = a.reshape(-1, probe.samples, *a.shape[1:])
    sd = a.std(axis=1)  # [n, k, A]
    return {"mean_std": float(sd.mean()), "per_dim_std": [round(float(x), 4) for x in sd.mean(axis=(0, 1))]}


def run(flow_from: str, tokens_from: str, noise_levels: list[float], probe: Probe) -> dict:
    t0 = time.perf_counter()
    rows = []
    obs = None
    for x1 in ("normal", "zeros"):
        for noise in noise_levels:
            for steps in ("one", "all", "last"):
                cfg, setup, model, bridge, params = _setup("rl-ppo-flow", flow_from, probe, flow_x1=x1,
                                                           flow_sde_steps=steps, noise_level=noise)
                if obs is None:
                    obs = _observations(setup, params, probe)
                k = cfg.rl.chunk_steps or model.cfg.action_horizon
                if steps == "one" and noise == noise_levels[0]:
                    rows.append({"head": "flow", "flow_x1": x1, "sampler": "ode",
                                 **_spread(model, bridge, params, *obs, probe, k, "ode")})
                rows.append({"head": "flow", "flow_x1": x1, "sampler": "flow_sde", "flow_sde_steps": steps,
                             "noise_level": noise, **_spread(model, bridge, params, *obs, probe, k)})
                print(json.dumps(rows[-1]), flush=True)
    if tokens_from:
        cfg, setup, model, bridge, params = _setup("rl-grpo-tokens", tokens_from, probe)
        tok_obs = _observations(setup, params, probe)
        k = cfg.rl.chunk_steps or model.cfg.action_horizon
        rows.append({"head": "tokens", "temperature": 1.0, **_spread(model, bridge, params, *tok_obs, probe, k)})
        print(json.dumps(rows[-1]), flush=True)
    return {"probe": dataclasses.asdict(probe), "flow_from": flow_from, "tokens_from": tokens_from,
            "rows": rows, "seconds": round(time.perf_counter() - t0, 1),
            "command": " ".join(["experiments/flow_exploration.py", *sys.argv[1:]])}


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    flow_from: str  # flow-head SFT checkpoint directory
    tokens_from: str = ""  # token-head SFT checkpoint directory (optional)
    noise_levels: str = "0.5,0.2"  # flow_sde noise levels, comma-separated
    json: str = "runs/experiments/flow_exploration.json"


def main() -> None:
    a = cli.parse(Args, None, description=__doc__.split("\n")[0])
    for d in (a.flow_from, a.tokens_from):
        if d and not os.path.isdir(d):
            cli.error(f"not a directory: {d}")
    compile_cache.enable()
    out = run(a.flow_from, a.tokens_from, [float(x) for x in a.noise_levels.split(",")], Probe())
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    tmp = a.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, a.json)
    print(f"wrote {a.json} ({out['seconds']} s)")


if __name__ == "__main__":
    main()
