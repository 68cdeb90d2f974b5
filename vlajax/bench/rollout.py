"""`python -m vlajax.bench rollout --json PATH`: decisions/s of the pixel VLA rollout.

Times the production collection path -- `vlajax.rl.rollout.rollout` (the `lax.scan` over
`actor_step` that `vlajax.rl.loop.train` runs inside its jitted `collect`) with the VLA actor of
`vlajax.rl.actors.vla_actor` -- on `--num-envs` tabletop envs from pixels (goal suite, both
cameras at the RL presets' 32x32, 200-step episodes, continuing mode with auto-reset), for each
head of `--heads`, with the model the RL presets start from (`--model small`: the `sft-small`
architecture, ~1.5M parameters, chunks of 8 of which each decision executes 4 as with
`rl.chunk_steps=4`, 5 denoising steps; `--model default`: `ModelConfig()`'s smaller defaults,
chunks of 4, all executed):

- `flow`: the RL presets' flow sampler (`flow_sde`, x_1 = 0, stochastic last step, noise 0.5)
  with the VLA's own value head (`value_head='expert'`, PPO's critic);
- `tokens`: the token head at temperature 1 (no critic, as in `rl-grpo-tokens`).

Weights are freshly initialized (the cost of a decision does not depend on them). Episodes are
staggered (`--stagger`, default on): env b starts its episode b * L / B low-level steps in
(L = episode length, rounded down to whole chunks), so, as in a PPO run past its first
episode, envs finish at different decisions and a decision with a finished env is the common
case rather than one decision in L / H; `--no-stagger` starts every env at step 0.

One timed call is a jitted rollout of `--decisions` decisions of every env (env state carried
from call to call); decisions/s = num_envs * decisions / (median seconds of `--repeats` calls
after the compiling first call). The module only uses the rollout's public functions, so the
same command runs on older checkouts for side-by-side comparisons (`git worktree add`).

`--physics mjx c` times the same rollout on both simulators (`env.physics_impl` 'jax' = MJX, 'c'
= C MuJoCo on the host through `jax.pure_callback`, `vlajax/envs/tabletop/c_physics.py`), their
timed calls interleaved (call i of each back to back); `paired_ratios` gives each simulator's
decisions/s over the first's, call by call, as median [min, max].

Rows: {head, physics, physics_impl, model, execute, num_envs, decisions_per_call, decisions_per_s,
env_steps_per_s, resets_per_call, compile_s, seconds}.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import platform
import subprocess
import sys
import time
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.bench import write_result
from vlajax.config.presets.sft import SMALL_CPU_MODEL
from vlajax.config.schema import EnvConfig, ModelConfig
from vlajax.data.normalize import NormStats
from vlajax.models.vla import VLA
from vlajax.policies.bridge import Bridge
from vlajax.rl import actors
from vlajax.rl import rollout as ro
from vlajax.shared import cli, compile_cache

PHYSICS = {"mjx": "jax", "c": "c"}  # --physics -> env.physics_impl
HEADS = {  # ModelConfig fields of each benchmarked head
    "flow": dict(action_head="flow", flow_sampler="flow_sde", noise_level=0.5, flow_x1="zeros",
                 flow_sde_steps="last", value_head="expert"),
    "tokens": dict(action_head="tokens", value_head="none"),
}


def _identity(n: int) -> NormStats:
    z, o = np.zeros(n, np.float32), np.ones(n, np.float32)
    return NormStats(mean=z, std=o, q01=-o, q99=o)


def _git_commit() -> str:
    try:
        root = pathlib.Path(__file__).resolve().parents[2]
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def model_config(model: str, head: str) -> tuple[ModelConfig, int]:
    """(ModelConfig, executed actions per decision; 0 = all) of `--model` with `head`'s fields."""
    if model == "small":
        return dataclasses.replace(SMALL_CPU_MODEL, **HEADS[head]), 4
    return ModelConfig(**HEADS[head]), 0


def setup(head: str, num_envs: int, episode_length: int, stagger: bool, seed: int = 0, model_name: str = "small",
          physics: str = "mjx"):
    """The bench's pixel rollout: (env, actor, params, batched env state, env steps per decision).
    Goal suite, identity normalization, fresh weights; `stagger` puts env b b * L / B steps (whole
    chunks) into its episode; `physics` 'mjx' (env.physics_impl='jax') or 'c' (C MuJoCo)."""
    mcfg, execute = model_config(model_name, head)
    env_cfg = EnvConfig(suite="goal", obs_mode="pixels", num_envs=num_envs, image_size=mcfg.image_size,
                        episode_length=episode_length, physics_impl=PHYSICS[physics])
    h = execute or mcfg.action_horizon  # env steps per decision
    env = ro.make_env(env_cfg, h)
    norm = {"actions": _identity(mcfg.action_dim), "state": _identity(8)}
    bridge = Bridge(mcfg, tuple(sorted(env_cfg.cameras)), norm, env_action_dim=min(mcfg.action_dim, 4))
    model = VLA(mcfg)
    actor = actors.vla_actor(model, bridge, execute=execute)

    state = jax.jit(lambda k: ro.reset(env, ro.group_keys(k, num_envs)))(jax.random.key(seed))
    if stagger:
        offsets = (np.arange(num_envs) * episode_length // num_envs) // h * h
        state = state.replace(info={**state.info, "steps": jnp.asarray(offsets, jnp.float32)})
    obs0 = bridge.observation(jax.tree.map(lambda x: x[:1], state.obs), state.info["episode"]["task_id"][:1])
    params = jax.jit(model.init)(jax.random.key(seed + 1), obs0)["params"]
    return env, actor, params, state, h


class _Timed:
    """One (head, physics) rollout, compiled by the constructor; `call(i)` times one jitted rollout."""

    def __init__(self, head: str, physics: str, num_envs: int, decisions: int, episode_length: int, stagger: bool,
                 seed: int = 0, model_name: str = "small"):
        self.head, self.physics, self.model_name, self.seed = head, physics, model_name, seed
        self.num_envs, self.decisions = num_envs, decisions
        env, actor, self.params, self.state, self.h = setup(head, num_envs, episode_length, stagger, seed, model_name,
                                                            physics)

        @jax.jit
        def run(params, state, rng):
            state, traj = ro.rollout(actor, env, params, state, rng, decisions, 0, True)
            return state, jnp.sum(traj["done"]), jnp.sum(traj["action_mask"])

        self._run = run
        t0 = time.perf_counter()
        self.state, _, _ = jax.block_until_ready(run(self.params, self.state, jax.random.key(seed + 2)))
        self.compile_s = time.perf_counter() - t0
        self.times, self.resets, self.steps = [], [], []

    def call(self, i: int) -> None:
        t0 = time.perf_counter()
        self.state, n_done, n_steps = jax.block_until_ready(
            self._run(self.params, self.state, jax.random.key(self.seed + 3 + i)))
        self.times.append(time.perf_counter() - t0)
        self.resets.append(int(n_done))
        self.steps.append(float(n_steps))

    def row(self) -> dict:
        sec = float(np.median(self.times))
        return {
            "head": self.head,
            "physics": self.physics,
            "physics_impl": PHYSICS[self.physics],
            "model": self.model_name,
            "model_fields": HEADS[self.head],
            "execute": self.h,
            "num_envs": self.num_envs,
            "decisions_per_call": self.decisions,
            "decisions_per_s": round(self.num_envs * self.decisions / sec, 2),
            "env_steps_per_s": round(float(np.median(self.steps)) / sec, 1),
            "resets_per_call": self.resets,
            "compile_s": round(self.compile_s, 1),
            "seconds": [round(t, 4) for t in self.times],
        }


def time_head(head: str, num_envs: int, decisions: int, repeats: int, episode_length: int, stagger: bool,
              seed: int = 0, model_name: str = "small", physics: str = "mjx") -> dict:
    """Median decisions/s of `repeats` jitted rollouts of `decisions` decisions (see the module docstring)."""
    t = _Timed(head, physics, num_envs, decisions, episode_length, stagger, seed, model_name)
    for i in range(repeats):
        t.call(i)
    return t.row()


def paired(head: str, physics: tuple[str, ...], num_envs: int, decisions: int, repeats: int, episode_length: int,
           stagger: bool, seed: int = 0, model_name: str = "small") -> tuple[list[dict], dict | None]:
    """Rows of every `physics` for one head, their timed calls interleaved (call i of each physics back to
    back, so a slow phase of a shared machine hits all alike), and -> (rows, ratios): each physics's
    decisions/s over the first's, per repeat (call i over call i) as median [min, max]."""
    timed = [_Timed(head, p, num_envs, decisions, episode_length, stagger, seed, model_name) for p in physics]
    for i in range(repeats):
        for t in timed:
            t.call(i)
    rows = [t.row() for t in timed]
    if len(timed) < 2:
        return rows, None
    base = np.asarray(timed[0].times)
    ratios = {}
    for t in timed[1:]:
        r = base / np.asarray(t.times)  # decisions/s ratio = seconds ratio (same decisions per call)
        ratios[f"{t.physics}_over_{timed[0].physics}"] = {"median": round(float(np.median(r)), 3),
                                                          "min": round(float(r.min()), 3),
                                                          "max": round(float(r.max()), 3)}
    return rows, ratios


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: pathlib.Path | None = None  # write the results here
    heads: tuple[Literal["flow", "tokens"], ...] = ("flow", "tokens")  # action heads to time (keys of HEADS)
    model: Literal["small", "default"] = "small"  # small: the sft-small model RL starts from; default: ModelConfig()
    num_envs: int = 16
    decisions: int = 10  # decisions of every env per timed call
    repeats: int = 5  # timed calls after the compiling one
    episode_length: int = 200  # low-level steps per episode
    stagger: bool = True  # start env b b*L/B steps into its episode (envs finish at different decisions)
    # simulators, timed side by side (interleaved calls): mjx = MJX (env.physics_impl='jax'), c = C MuJoCo on
    # the host (env.physics_impl='c'); the rows of the second are also given as a ratio to the first
    physics: tuple[Literal["mjx", "c"], ...] = ("mjx",)


def main(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog="python -m vlajax.bench rollout", description=__doc__.splitlines()[0])
    for name in ("num_envs", "decisions", "repeats", "episode_length"):
        if getattr(args, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    if not args.physics or len(set(args.physics)) != len(args.physics):
        print("error: --physics must name distinct simulators (mjx, c)", file=sys.stderr)
        return 2
    compile_cache.enable()

    load_start = os.getloadavg()
    rows, ratios = [], {}
    for head in args.heads:
        head_rows, head_ratios = paired(head, args.physics, args.num_envs, args.decisions, args.repeats,
                                        args.episode_length, args.stagger, model_name=args.model)
        rows += head_rows
        for row in head_rows:
            print(f"rollout {head:7s} {row['physics']:3s} num_envs={args.num_envs} {row['decisions_per_s']:9.2f} "
                  f"decisions/s ({row['env_steps_per_s']} env steps/s; compile {row['compile_s']} s; resets/call "
                  f"{row['resets_per_call']})", flush=True)
        if head_ratios:
            ratios[head] = head_ratios
            print(f"rollout {head:7s} paired ratios (per call, median [min, max]): {head_ratios}", flush=True)
    result = {
        "benchmark": "rollout",
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": _git_commit(),
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(),
                    "load_average_1m_start_end": [round(load_start[0], 2), round(os.getloadavg()[0], 2)]},
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "stagger": args.stagger,
        "episode_length": args.episode_length,
        "physics": list(args.physics),
        "command": "python -m vlajax.bench rollout " + " ".join(argv),
        "rows": rows,
        "paired_ratios": ratios,
    }
    write_result(args.json, result)
    return 0
