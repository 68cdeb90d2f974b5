"""What the two RL loops share: the `Setup` (actor, env, evaluation), its `build`, the pure pieces.

`vlajax.rl.loop` (synchronous) and `vlajax.rl.async_loop` (through the asynchronous pipeline,
with `vlajax.rl.async_workload` for env slots) both take from here; neither imports the other.

- rng streams and keys: iteration i uses `fold_in(key(seed), i)`, then `ENV_STREAM` for its
  collect and `UPDATE_STREAM` for its update (`iteration_keys`); `EVAL_STREAM` for evaluation.
- `collect(cfg, setup, params, env_state, rng, version)`: one iteration's data (the jitted
  `lax.scan` rollout, advantages, the flat learner batch [N, ...]).
- `build(cfg, mesh)`: the policy of the run -- the MLP Gaussian chunk policy for
  `env.obs_mode='state'`, the VLA through `vlajax.policies.bridge.Bridge` for pixels (optionally
  initialized from an SFT run: `load_sft`, `merge_params`).
- env state helpers for checkpoints (`env_leaves`, `env_unleaves`) and meshes
  (`place_env_state`), the decisions check (`check_decisions`), the logged evaluation
  (`log_eval`) and the `rl` command's ending (`run_and_report`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import ConfigError, EnvConfig, TrainConfig
from vlajax.data.normalize import NormStats
from vlajax.data.openpi import camera_map, model_slots
from vlajax.envs import registry
from vlajax.envs.base import Env
from vlajax.envs.tabletop import env as tabletop_env
from vlajax.envs.tabletop import tasks as tabletop_tasks
from vlajax.evaluation import closed_loop
from vlajax.models import build_model
from vlajax.models.observation import fake_observation
from vlajax.policies import run_files
from vlajax.policies.bridge import Bridge
from vlajax.rl import actors, learner, mlp_policy
from vlajax.rl import advantages as adv_lib
from vlajax.rl import rollout as ro
from vlajax.training import distributed, sharding
from vlajax.training.logging import MetricsLogger
from vlajax.training.run import Run
from vlajax.training.train_state import TrainState

__all__ = [
    "ENV_STREAM", "EVAL_STREAM", "UPDATE_STREAM", "Setup", "build", "check_decisions", "collect", "env_leaves",
    "env_unleaves", "episodic", "eval_seed", "initial_env_state", "iteration_keys", "Learner", "load_sft", "log_eval",
    "covers", "make_learner", "merge_params", "open_policy_checkpoints", "place_env_state", "run_and_report",
]

log = logging.getLogger(__name__)

ENV_STREAM, UPDATE_STREAM, EVAL_STREAM = 1, 2, 3  # rng streams folded into each iteration's key


@dataclasses.dataclass(frozen=True, eq=False)
class Setup:
    """Everything the loop needs besides the config (built by `build`; tests pass toy ones)."""

    actor: actors.Actor
    env: Env  # the training batch (env.num_envs envs)
    init_params: Callable[[jax.Array], Any]  # rng -> params (may be flax-boxed)
    evaluate: Callable[[Any, int], dict[str, Any]]  # (params, iteration) -> {'mean_success', 'per_task'}
    action_horizon: int
    episode_decisions: int  # decisions that cover one episode (GRPO rollout length)
    bridge: Any = None  # the VLA's `Bridge` (the run's policy.json: its checkpoints serve); None for the MLP
    loaded: Any = None  # the params of `rl.init_from` (unboxed), merged over init_params' (`start_params`)

    def start_params(self, rng: jax.Array, loaded: Any = None) -> Any:
        """The policy's starting params: `init_params(rng)` with every leaf of `loaded` (`self.loaded`, or the
        same tree passed in -- as a jit argument, so the weights are not baked into the program) replaced by its
        loaded value. When `loaded` has every leaf, the random init is not run (nor, under jit, compiled: its
        RNG program took 23-33 s of CPU to compile for sft-libero-tiny / -small); only its shapes are traced."""
        loaded = self.loaded if loaded is None else loaded
        if loaded is None:
            return self.init_params(rng)
        abstract = jax.eval_shape(self.init_params, rng)
        if covers(loaded, abstract):
            fresh = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), abstract)  # (every leaf replaced below)
        else:
            fresh = self.init_params(rng)
        return merge_params(fresh, loaded)


# ----------------------------------------------------------------------------------------
# The pure pieces (module level; both loops and the async workload use them)
# ----------------------------------------------------------------------------------------


def episodic(cfg: TrainConfig) -> bool:
    """GRPO plays one episode per env per iteration; PPO runs continuing envs."""
    return cfg.rl.algo == "grpo"


def initial_env_state(cfg: TrainConfig, env: Env):
    """The PPO env state before iteration 0 (None for GRPO, which resets every iteration)."""
    if episodic(cfg):
        return None
    key = jax.random.fold_in(jax.random.key(cfg.seed), ENV_STREAM)
    return ro.reset(env, ro.group_keys(key, cfg.env.num_envs))


def collect(cfg: TrainConfig, setup: Setup, params: Any, env_state: Any, rng: jax.Array, version: jax.Array):
    """One iteration's data. -> (env_state, learner batch [N, ...], metrics).

    GRPO: reset `num_envs` envs in groups of `rl.group_size` from `rng` (tasks dealt to the
    groups in turn with `rl.group_tasks='balanced'`, else drawn per group) and play one episode;
    PPO: `rl.rollout_length` decisions from `env_state`. Advantages by `rl.advantage`. The
    recorded log-probs come from the sampling pass itself for the VLA (`Actor.act` / `score`,
    one forward per decision) and from the actor's `logp_value` (the learner's function) for
    the MLP, so the first update's ratio is 1 to float32 rounding: the rollout's and the learner's
    compiled programs may fuse differently (a few ulps in a log-prob; the bounds and their reason:
    `tests/rl/float_tolerance.py`; the test:
    `tests/rl/test_rollout.py::test_first_update_on_fresh_data_has_ratio_one_to_rounding`).
    """
    k_reset, k_roll = jax.random.split(rng)
    if episodic(cfg):
        n, g = cfg.env.num_envs, cfg.rl.group_size
        tasks = None
        if cfg.rl.group_tasks == "balanced":
            tasks = ro.balanced_task_ids(setup.env, jax.random.fold_in(k_reset, 1), n, g)
        env_state = ro.reset(setup.env, ro.group_keys(k_reset, n, g), tasks)
        length, auto = setup.episode_decisions, False
    else:
        length, auto = cfg.rl.rollout_length, True
    env_state, traj = ro.rollout(setup.actor, setup.env, params, env_state, k_roll, length, version, auto)
    result = adv_lib.get_estimator(adv_lib.estimator_name(cfg.rl))(cfg.rl, ro.advantage_inputs(traj))
    metrics = ro.rollout_metrics(traj) | result.metrics
    return (None if episodic(cfg) else env_state), ro.learner_batch(traj, result), metrics


@functools.partial(jax.jit, static_argnums=0)
def _iteration_keys(seed: int, iteration) -> tuple[jax.Array, jax.Array]:
    key = jax.random.fold_in(jax.random.key(seed), iteration)
    return jax.random.fold_in(key, ENV_STREAM), jax.random.fold_in(key, UPDATE_STREAM)


def iteration_keys(seed: int, iteration: int) -> tuple[jax.Array, jax.Array]:
    """(collect key, update key) of an iteration: derived, never stored. One jitted call (the same keys
    as the four random ops run eagerly: 0.02 instead of 0.67 ms per iteration on a 2-core CPU)."""
    return _iteration_keys(int(seed), iteration)


# ----------------------------------------------------------------------------------------
# Policies
# ----------------------------------------------------------------------------------------


def build(cfg: TrainConfig, mesh=None) -> Setup:
    """The actor, env and evaluation for `cfg` (MLP for state observations, VLA for pixels)."""
    if cfg.model.fp8 != "none":  # (the CLI refuses it first: vlajax.preflight)
        raise ConfigError(f"model.fp8={cfg.model.fp8!r} is for sft: the RL train states carry no FP8 scale "
                          "collections yet; use model.fp8='none' for rl")
    physics = ro.rollout_physics(cfg.env)
    log.info("rl: the rollout steps %s (env.physics_impl=%r; docs/envs.md)",
             {"c": "C MuJoCo on the host", "jax": "MJX", "warp": "MJX-Warp"}[physics], cfg.env.physics_impl)
    if cfg.env.obs_mode == "state":
        return _build_mlp(cfg)
    return _build_vla(cfg, mesh)


def _build_mlp(cfg: TrainConfig) -> Setup:
    if cfg.rl.temperature != 1.0:
        raise ConfigError(f"rl.temperature={cfg.rl.temperature} is the token head's sampling temperature: the state "
                          "MLP's Gaussian policy has none (use 1)")
    if cfg.rl.critic == "privileged":
        raise ConfigError("rl.critic='privileged' is for pixel policies (env.obs_mode='pixels'): the state MLP's "
                          "own critic already reads the privileged state")
    h = cfg.model.action_horizon
    env = ro.make_env(cfg.env, h, reward=cfg.rl.reward)
    hidden = (cfg.model.width,) * cfg.model.depth
    model = mlp_policy.MLPActorCritic(action_horizon=h, action_dim=env.action_size, hidden=hidden,
                                      value_hidden=hidden)
    obs_dim = env.observation_size
    actor = actors.mlp_actor(model, use_value=cfg.rl.algo == "ppo")
    n_eval, decisions = _eval_sizes(cfg)
    eval_env = ro.make_env(cfg.env, h, num_envs=n_eval)
    task_ids = np.repeat(np.asarray(eval_env.task_ids, np.int32), cfg.rl.eval_episodes_per_task)
    run_eval = jax.jit(functools.partial(ro.evaluate, actor, eval_env, length=decisions))

    def evaluate(params, iteration):
        key = jax.random.fold_in(jax.random.key(eval_seed(cfg)), EVAL_STREAM)
        out = jax.device_get(run_eval(params, key, jnp.asarray(task_ids)))
        return _per_task(cfg, task_ids, out["success"])

    def init_params(rng):
        return model.init(rng, jnp.zeros((1, obs_dim)))["params"]

    return Setup(actor, env, init_params, evaluate, h, ro.decisions_per_episode(cfg.env.episode_length, h))


def eval_seed(cfg: TrainConfig) -> int:
    """The evaluation episodes' seed: `rl.eval_seed`, or the run's seed when it is -1."""
    return cfg.seed if cfg.rl.eval_seed < 0 else cfg.rl.eval_seed


def _eval_sizes(cfg: TrainConfig) -> tuple[int, int]:
    n_tasks = len(registry.tasks_for(cfg.env))
    decisions = ro.decisions_per_episode(cfg.env.episode_length, cfg.model.action_horizon)
    return n_tasks * cfg.rl.eval_episodes_per_task, decisions


def _per_task(cfg: TrainConfig, task_ids: np.ndarray, success: np.ndarray) -> dict[str, Any]:
    per = {tabletop_tasks.TASKS[t].name: float(np.mean(success[task_ids == t])) for t in np.unique(task_ids)}
    return {"mean_success": float(np.mean(list(per.values()))), "per_task": per, "episodes": int(success.size)}


def _build_vla(cfg: TrainConfig, mesh) -> Setup:
    model_cfg, bridge, sft_params = load_sft(cfg, mesh) if cfg.rl.init_from else (cfg.model, None, None)
    if bridge is None:
        bridge = _identity_bridge(cfg)
    privileged = cfg.rl.algo == "ppo" and cfg.rl.critic == "privileged"
    if privileged:  # the critic is its own MLP: the VLA needs no value head
        model_cfg = dataclasses.replace(model_cfg, value_head="none")
        bridge = dataclasses.replace(bridge, model=model_cfg)
    if cfg.rl.temperature != 1.0 and model_cfg.action_head != "tokens":
        raise ConfigError(f"rl.temperature={cfg.rl.temperature} is the token head's sampling temperature; this "
                          f"model's head is {model_cfg.action_head!r} (use 1)")
    model = build_model(model_cfg)  # our VLA or openpi's pi0 / pi0.5
    h = cfg.rl.chunk_steps or model_cfg.action_horizon  # env steps per decision
    env = ro.make_env(cfg.env, h, reward=cfg.rl.reward, privileged_obs=privileged)
    if bridge.openpi is not None:  # an imported openpi policy acts in its robot's space (docs/models.md)
        o = bridge.openpi
        raise ConfigError(f"rl.init_from={cfg.rl.init_from}: an imported openpi policy ({o.train_config}) answers in "
                          f"the {o.robot} robot's {o.keys.action_dims}-dim actions, not this env's; fine-tune it on "
                          "the env's data first (sft --sft.init-from, with --sft.delta-actions off if it learned "
                          "delta actions), or run RL on its robot")
    critic = mlp_policy.ValueMLP((cfg.rl.critic_width,) * 2) if privileged else None
    actor = actors.vla_actor(model, bridge, use_value=cfg.rl.algo == "ppo", temperature=cfg.rl.temperature,
                             execute=cfg.rl.chunk_steps, critic=critic,
                             # per-entry log-probs for per-entry ratios, and for the KL penalty's per-entry estimator
                             per_factor=cfg.rl.ratio_level == "factor" or cfg.rl.kl_coef > 0)

    def init_params(rng):  # (the SFT params are merged over these: `Setup.start_params`)
        obs = fake_observation(rng, 1, model_cfg, cameras=bridge.cameras)
        params = model.init(rng, obs)["params"]
        if critic is not None:
            x = jnp.zeros((1, tabletop_env.PRIVILEGED_SIZE))
            params = {**params, "critic": critic.init(jax.random.fold_in(rng, 7), x)["params"]}
        return params

    eval_cfg = dataclasses.replace(cfg, model=model_cfg, seed=eval_seed(cfg),
                                   sft=dataclasses.replace(cfg.sft, eval_replan_steps=cfg.rl.chunk_steps))

    def evaluate(params, iteration):
        out_dir = os.path.join(cfg.output_dir, "eval", f"iteration-{iteration}")
        res = closed_loop.evaluate(eval_cfg, bridge, model, params, episodes_per_task=cfg.rl.eval_episodes_per_task,
                               out_dir=out_dir, gifs=cfg.logging.video_every > 0)
        out = {"mean_success": res["mean_success"], "per_task": res["per_task"],
               "episodes": int(sum(1 for _ in res["per_task"]) * cfg.rl.eval_episodes_per_task)}
        if cfg.env.robustness:  # the robustness table too (docs/robustness.md), logged as robustness/<axis>/<level>
            # lazy: the robustness tables' stack (~0.7 s of imports) only for runs that evaluate robustness
            from vlajax.evaluation.robustness import evaluate_robustness

            rob = evaluate_robustness(eval_cfg, bridge, model, params, episodes_per_task=cfg.rl.eval_episodes_per_task,
                                      out_dir=os.path.join(out_dir, "robustness"), gifs=cfg.logging.video_every > 0)
            out["robustness"] = {f"{a}/{lv}": v for a, by in rob["mean"].items() for lv, v in by.items()}
        return out

    return Setup(actor, env, init_params, evaluate, h, ro.decisions_per_episode(cfg.env.episode_length, h), bridge,
                 sft_params)


def _identity_bridge(cfg: TrainConfig):
    """A bridge without dataset statistics (RL from scratch): identity normalization."""
    def ident(n):
        z, o = np.zeros(n, np.float32), np.ones(n, np.float32)
        return NormStats(mean=z, std=o, q01=-o, q99=o)

    norm = {"actions": ident(cfg.model.action_dim), "state": ident(8)}
    cams, cmap = tuple(sorted(cfg.env.cameras)), ()
    if cfg.model.family != "vla":  # a π policy from fresh weights: the env cameras in openpi's image slots
        cmap = camera_map(cfg.data.camera_map, cams, model_slots(cfg.model))
    return Bridge(cfg.model, cams, norm, env_action_dim=min(cfg.model.action_dim, 4), camera_map=cmap)


def load_sft(cfg: TrainConfig, mesh):
    """(model config, bridge, params) of the SFT checkpoint in `rl.init_from`."""
    directory = os.path.abspath(os.path.expanduser(cfg.rl.init_from))
    try:
        sft_cfg = run_files.load_config(directory)
        bridge = Bridge.load(directory)
    except FileNotFoundError as e:
        raise ConfigError(f"rl.init_from: {e}") from None
    abstract, _ = run_files.abstract_train_state(sft_cfg, bridge.cameras, mesh)
    params, extra = run_files.restore_eval_params(directory, abstract, "rl.init_from")
    m = cfg.model
    model_cfg = dataclasses.replace(sft_cfg.model, flow_sampler=m.flow_sampler, noise_level=m.noise_level,
                                    flow_x1=m.flow_x1, flow_sde_steps=m.flow_sde_steps, value_head=m.value_head,
                                    trainable=m.trainable)
    bridge = dataclasses.replace(bridge, model=model_cfg)
    log.info("rl: initialized from %s (SFT step %s)", directory, extra.get("step"))
    return model_cfg, bridge, params


def _unboxed_path(path: tuple) -> tuple:
    """A leaf's tree path with flax's box (`.value`) step left out: the path of the same leaf unboxed."""
    return tuple(p for p in path if not (isinstance(p, jax.tree_util.GetAttrKey) and p.name == "value"))


def covers(loaded: Any, fresh: Any) -> bool:
    """Whether `loaded` has a value for every leaf of `fresh` (maybe flax-boxed; arrays or ShapeDtypeStructs)."""
    have = {path for path, _ in jax.tree_util.tree_flatten_with_path(loaded)[0]}
    return all(_unboxed_path(path) in have for path, _ in jax.tree_util.tree_flatten_with_path(fresh)[0])


def merge_params(fresh: Any, loaded: Any) -> Any:
    """`fresh` (maybe flax-boxed) with every leaf that `loaded` has replaced by the loaded value."""
    flat_loaded = dict(jax.tree_util.tree_flatten_with_path(loaded)[0])

    def one(path, leaf):
        key = _unboxed_path(path)
        if key in flat_loaded:
            new = flat_loaded[key]
            if isinstance(leaf, nn.spmd.LogicallyPartitioned | nn.Partitioned):
                return leaf.replace_boxed(jnp.asarray(new, leaf.value.dtype))
            return jnp.asarray(new, leaf.dtype)
        return leaf

    return jax.tree_util.tree_map_with_path(one, fresh, is_leaf=lambda x: isinstance(
        x, nn.spmd.LogicallyPartitioned | nn.Partitioned))


# ----------------------------------------------------------------------------------------
# On the run skeleton: the learner's state and update, the policy's checkpoints
# ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Learner:
    """The train state on its shards and the jitted, donated `learner.update` of an RL run."""

    state: Any  # TrainState (params, optimizer state, step, RNG)
    shardings: Any  # the state's NamedShardings
    ref_params: Any  # the frozen reference policy of `rl.kl_coef > 0` (else None)
    update_fn: Callable  # (rng, state, batch) -> (state, metrics); the state donated


def make_learner(run: Run, setup: Setup) -> Learner:
    """The policy's train state born on its shards (`run.init_state`), AdamW of `rl`, the reference params
    (the initial policy, before any resume, when `rl.kl_coef > 0`) and `learner.update` jitted with the
    state's shardings and donation -- the same for the synchronous and the async loop."""
    cfg = run.cfg
    tx = learner.make_optimizer(cfg.rl)

    def init(rng, loaded):  # (the loaded params are an argument of the jitted init, not constants in it)
        return TrainState.create(setup.start_params(rng, loaded), tx, jax.random.fold_in(rng, 1))

    state, shardings = run.init_state(init, setup.loaded)
    ref_params = jax.tree.map(jnp.copy, state.params) if cfg.rl.kl_coef > 0 else None
    update_fn = jax.jit(functools.partial(learner.update, cfg.rl, setup.actor.logp_value),
                        in_shardings=(None, shardings, None), out_shardings=(shardings, None), donate_argnums=(1,))
    return Learner(state, shardings, ref_params, update_fn)


def open_policy_checkpoints(run: Run, setup: Setup, source: str, env: EnvConfig | None) -> str:
    """`run.open_checkpoints()`, then (a VLA run, process 0) `config.json` + `policy.json` beside them, so that
    the checkpoints are a policy (`source` 'rl' / 'async-rl'; `env`: the rollout's, its physics recorded).
    -> the checkpoint directory."""
    directory, _ = run.open_checkpoints()
    if setup.bridge is not None and distributed.is_main_process():
        run_files.write_policy(directory, run.cfg.replace(model=setup.bridge.model), setup.bridge, source,
                               rollout_physics=None if env is None else ro.rollout_physics(env))
    return directory


# ----------------------------------------------------------------------------------------
# Env state, checks, evaluation, the command's ending
# ----------------------------------------------------------------------------------------


def place_env_state(env_state: Any, mesh) -> Any:
    """Env state (None for GRPO) split over `dp` along the env axis (each device steps its share of the envs).

    Zero-size leaves (`mjx.Data` has some) are replicated: the jitted collect returns them
    replicated whatever their input placement, and a placement that changed between iterations
    would compile the collect again at iteration 2."""
    if env_state is None:
        return None
    dp = mesh.shape[sharding.DP]

    def one(x):
        ok = x.ndim >= 1 and x.size > 0 and x.shape[0] % dp == 0
        return jax.device_put(x, sharding.data_sharding(mesh) if ok else sharding.replicated(mesh))

    return jax.tree.map(one, env_state)


def env_leaves(env_state: Any) -> list:
    """The env state's non-empty leaves (Orbax refuses zero-size arrays; mjx.Data has some)."""
    return [x for x in jax.tree.leaves(env_state) if x.size > 0]


def env_unleaves(template: Any, leaves: list) -> Any:
    """Inverse of `env_leaves`: `template`'s structure and empty leaves, `leaves` for the rest."""
    flat, treedef = jax.tree.flatten(template)
    it = iter(leaves)
    return jax.tree.unflatten(treedef, [next(it) if x.size > 0 else x for x in flat])


def check_decisions(cfg: TrainConfig, setup: Setup, mesh) -> int:
    """Decisions per iteration (all envs); ConfigError when they do not split into minibatches."""
    t = setup.episode_decisions if episodic(cfg) else cfg.rl.rollout_length
    n = cfg.env.num_envs * t
    k = cfg.rl.num_minibatches * cfg.rl.micro_batches
    if n % k:
        raise ConfigError(f"{n} decisions per iteration (env.num_envs={cfg.env.num_envs} x {t}) do not split "
                          f"into rl.num_minibatches x rl.micro_batches = {k}")
    return n


def log_eval(setup: Setup, logger: MetricsLogger, params: Any, iteration: int, env_steps: float,
              step_name: str = "iteration") -> dict:
    """Closed-loop evaluation at `iteration` (the async loop counts updates: `step_name='update'`),
    logged to TensorBoard and the log. -> the record {step_name, env_steps, seconds, ...evaluate's}."""
    t0 = time.perf_counter()
    ev = setup.evaluate(params, iteration)
    logger.scalars(iteration, {"mean_success": ev["mean_success"],
                               **{f"success/{k}": v for k, v in ev["per_task"].items()},
                               **{f"robustness/{k}": v for k, v in ev.get("robustness", {}).items()}}, prefix="eval/")
    log.info("rl: %s %d eval mean success %.3f %s", step_name, iteration, ev["mean_success"], ev["per_task"])
    return {step_name: iteration, "env_steps": env_steps, "seconds": round(time.perf_counter() - t0, 1)} | ev


def run_and_report(cfg: TrainConfig, train_fn: Callable[[TrainConfig], dict],
                   short: Callable[[dict], dict]) -> int:
    """The `rl` commands' ending: run `train_fn`; a non-finite update prints one `error:` line and
    returns 1; otherwise process 0 prints `short(summary)` as one JSON line and 0 is returned."""
    try:
        summary = train_fn(cfg)
    except learner.NonFiniteError as e:
        print(f"error: {e}", flush=True)
        distributed.shutdown()
        return 1
    if distributed.is_main_process():
        print(json.dumps(short(summary), default=float), flush=True)
    distributed.shutdown()
    return 0
