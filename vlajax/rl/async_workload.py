"""The RL workload of the async pipeline (`vlajax.pipeline`): tabletop envs in slots, the RL actor and learner.

`RLWorkload(cfg, setup)` implements the bench `Workload` interface (and `vlajax.rl.async_loop`
uses it for `pipeline.num_slots > 1`):

- `env(num_slots, latency, physics_impl=None)` -> `(reset, step, infer)` for `SlotRollout`. Slot s holds
  `env.num_envs // num_slots` envs of `vlajax.rl.rollout.make_env`. `infer(params, payloads)`
  runs `actor.act` (the VLA: one prefix pass samples and scores its draws and the value; else
  `actor.sample`) for every waiting slot in one jitted call (padded to `num_slots` rows, one
  compile) and returns `(env_actions, record, scores, params, key)` per slot; the slot's `step`
  then runs the RL core's own `rollout.actor_step` with that sample and its scores plugged in
  (same key split, the same `actor.score` of the behaviour log-prob and value as the synchronous
  one-forward decision -- without `act`, `logp_value` on the record with the params that
  sampled -- same auto-reset), so a slot decision is the synchronous decision cut in two at the
  inference boundary.
  Decision d of slot s uses `fold_in(fold_in(root, s), d)` with `root = key(seed)`, or
  `fold_in(key(seed), start)` for a run resumed at update `start` (slot env state is not
  checkpointed: the resumed slots reset into new episodes and noise instead of replaying
  update 0's). The record carries the
  policy version (tagged by the slot), the flow chain + stochastic step for the flow head, and
  `next_value` = V(s_{t+1}) on a segment's last row (`rl.rollout_length` decisions from the
  slot's reset; 0 on the other rows, which nothing reads; `step` compiles twice, with and
  without that value pass; GAE bootstraps from the last row).
- `trainer(device, streaming)` -> `train_step(state, micro_batches)`: each micro-batch (one
  slot segment `[T, B_slot]`, or an already prepared learner batch from `collect`) becomes a
  flat learner batch (advantages per segment by `rl.advantage`). Without streaming the
  micro-batches are concatenated and `learner.update` runs (epochs x minibatches x
  `rl.micro_batches`); with streaming every arriving micro-batch is one learner micro-batch:
  `compute_gradients(normalizer=1)` sums (maxima kept as maxima), then one `apply_gradients`
  scaled by the total valid count, skipped when `rl.target_kl` is exceeded, as in the
  non-streaming update (requires `rl.update_epochs == rl.num_minibatches == 1`,
  `rl.micro_batches == pipeline.require_batches` and `rl.normalize_advantages='none'`).
  `pipeline.use_rollout_log_probs=False` adds `prox_logp` recomputed with the trainer's params
  before the update: the decoupled-PPO loss of `vlajax.rl.losses` (behaviour = rollout log-probs).
  Update u uses `vlajax.rl.setup.iteration_keys(seed, u)[1]`, as the synchronous loop does.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.pipeline.latency import LatencyModel, with_latency
from vlajax.rl import actors, learner
from vlajax.rl import advantages as adv_lib
from vlajax.rl import rollout as ro
from vlajax.rl.setup import Setup, iteration_keys
from vlajax.training.train_state import TrainState

__all__ = ["RLWorkload", "check_streaming", "prepare_segment"]


def check_streaming(cfg: TrainConfig, require_batches: int | None = None) -> None:
    """Streaming is one optimizer update per global batch of `require_batches` micro-batches
    (`rl.update_epochs = rl.num_minibatches = 1`, `rl.micro_batches = pipeline.require_batches`),
    and that update must be the non-streaming one: advantages standardized over the global batch
    ('batch' / 'minibatch' with one minibatch) would need every micro-batch before the first
    gradient, so only `rl.normalize_advantages='none'` streams."""
    rl = cfg.rl
    if rl.normalize_advantages != "none":
        raise ConfigError(f"pipeline.streaming with rl.normalize_advantages={rl.normalize_advantages!r}: the "
                          "non-streaming update standardizes advantages over the whole global batch, which a "
                          "gradient started on the first micro-batch cannot; set rl.normalize_advantages='none' "
                          "or pipeline.streaming=false")
    ok = rl.update_epochs == 1 and rl.num_minibatches == 1
    if require_batches is not None:
        ok = ok and rl.micro_batches == require_batches
    if not ok:
        raise ConfigError("pipeline.streaming needs rl.update_epochs=1, rl.num_minibatches=1 and "
                          f"rl.micro_batches=pipeline.require_batches (got {rl.update_epochs}, {rl.num_minibatches}, "
                          f"{rl.micro_batches} vs {require_batches}): one update per global batch")


def prepare_segment(cfg: TrainConfig, traj: dict) -> dict:
    """A slot segment (records `[T, B, ...]`, `next_value` on the last row) -> flat learner batch `[B*T]`."""
    traj = dict(traj)
    next_value = traj.pop("next_value", None)
    if "old_values" in traj:
        traj["last_value"] = next_value[-1]
    result = adv_lib.get_estimator(adv_lib.estimator_name(cfg.rl))(cfg.rl, ro.advantage_inputs(traj))
    return ro.learner_batch(traj, result)


class RLWorkload:
    """The RL core behind the bench `Workload` interface (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, setup: Setup):
        self.cfg, self.setup = cfg, setup
        self.envs = cfg.env.num_envs
        self.horizon = cfg.rl.rollout_length
        self.steps_per_decision = setup.action_horizon
        self.tx = learner.make_optimizer(cfg.rl)
        actor = setup.actor
        if not actor.has_value:
            raise ConfigError("the slot rollout runs continuing envs (PPO with a critic); GRPO runs through collect")

        one_forward = actor.act is not None  # the VLA: the sampling pass also scores (no second prefix pass)

        def sample(params, obs, task_id, keys):  # [S, B, ...] slots x envs; one key per slot
            def one(o, t, k):  # the key actor_step gives the policy (its split's first key)
                k_act = jax.random.split(jax.random.wrap_key_data(k), 3)[0]
                if one_forward:
                    return actor.act(params, o, t, k_act)
                return (*actor.sample(params, o, t, k_act), {})
            return jax.vmap(one)(obs, task_id, keys)

        self._sample = jax.jit(sample)

        def step(env, params, state, env_actions, record, scores, key, version, last):
            fixed = actors.Actor(lambda *a, **k: (env_actions, record), actor.logp_value, actor.value, actor.name,
                                 act=(lambda *a, **k: (env_actions, record, scores)) if one_forward else None,
                                 score=actor.score, logp_mask=actor.logp_mask)
            nxt, out = ro.actor_step(fixed, env, params, state, jax.random.wrap_key_data(key), version, True)
            # V(s_{t+1}): GAE bootstraps from the segment's last row only (prepare_segment); other rows get 0
            out["next_value"] = (actor.value(params, nxt.obs, nxt.info["episode"]["task_id"]) if last
                                 else jnp.zeros(nxt.done.shape, jnp.float32))
            return nxt, out

        self._step_fn = step
        self._prepare = jax.jit(functools.partial(prepare_segment, cfg))
        self._envs: dict[int, Any] = {}
        self._trainers: dict[tuple, Trainer] = {}

    # -- state ------------------------------------------------------------------------------

    def init_state(self, seed: int) -> TrainState:
        rng = jax.random.key(seed)
        return TrainState.create(self.setup.start_params(rng), self.tx, jax.random.fold_in(rng, 1))

    def get_params(self, state: TrainState) -> Any:
        return state.params

    # -- rollout ----------------------------------------------------------------------------

    def _env_fns(self, per: int, physics_impl: str | None = None):
        """(env, jitted step, jitted reset) for slots of `per` envs, built once per (size, physics)."""
        physics_impl = physics_impl or self.cfg.env.physics_impl
        if (per, physics_impl) not in self._envs:
            env_cfg = dataclasses.replace(self.cfg.env, physics_impl=physics_impl)
            env = ro.make_env(env_cfg, self.setup.action_horizon, num_envs=per, reward=self.cfg.rl.reward)
            self._envs[per, physics_impl] = (env, jax.jit(functools.partial(self._step_fn, env), static_argnums=7),
                                             jax.jit(lambda k: ro.reset(env, ro.group_keys(k, per))))
        return self._envs[per, physics_impl]

    def env(self, num_slots: int, latency: LatencyModel | None, seed: int | None = None,
            physics_impl: str | None = None, start: int = 0):
        """(reset, step, infer) for `SlotRollout`; env state per slot is `(State, decision count)`.
        `physics_impl` overrides `env.physics_impl` (the bench's CPU-bound regime: 'c'); `start`:
        the optimizer updates a resumed run has done (its key streams continue from there)."""
        if self.envs % num_slots:
            raise ConfigError(f"env.num_envs={self.envs} does not split into pipeline.num_slots={num_slots}")
        per = self.envs // num_slots
        _, step_fn, reset_fn = self._env_fns(per, physics_impl)
        root = jax.random.key(self.cfg.seed if seed is None else seed)
        if start:
            root = jax.random.fold_in(root, start)

        def payload(slot, state, d):
            key = jax.random.key_data(jax.random.fold_in(jax.random.fold_in(root, slot), d))
            return {"obs": state.obs, "task_id": state.info["episode"]["task_id"], "key": key}

        def reset(slot):
            state = reset_fn(jax.random.fold_in(jax.random.fold_in(root, 1_000_003), slot))
            return (state, 0), payload(slot, state, 0)

        def step(slot, env_state, out):
            state, d = env_state
            env_actions, record, scores, params, key = out
            last = (d + 1) % self.horizon == 0  # a segment is `rl.rollout_length` decisions from the slot's reset
            nxt, rec = step_fn(params, state, env_actions, record, scores, key, jnp.int32(0), last)
            rec.pop("version")  # the pipeline tags versions itself (Trajectory.versions)
            return (nxt, d + 1), payload(slot, nxt, d + 1), rec

        def infer(params, payloads):  # padded to num_slots rows: one static shape, one compile
            rows = payloads + [payloads[-1]] * (num_slots - len(payloads))
            stack = lambda k: jax.tree.map(lambda *xs: jnp.stack(xs), *[q[k] for q in rows])  # pixels: a dict
            env_actions, record, scores = self._sample(params, stack("obs"), stack("task_id"), stack("key"))
            row = lambda tree, i: jax.tree.map(lambda x: x[i], tree)
            return [(env_actions[i], row(record, i), row(scores, i), params, payloads[i]["key"])
                    for i in range(len(payloads))]

        if latency is not None:
            step = with_latency(step, latency, per, self.cfg.seed, steps_per_call=self.setup.action_horizon)
        return reset, step, infer

    # -- training ---------------------------------------------------------------------------

    def trainer(self, device: Any, streaming: bool, require_batches: int = 1, *,
                use_rollout_log_probs: bool = True) -> Trainer:
        """train_step for slot segments; streaming sets `rl.micro_batches = require_batches`.
        Built once per (device, streaming, require_batches, log-prob mode); its update count restarts."""
        key = (device, streaming, require_batches, use_rollout_log_probs)
        if key not in self._trainers:
            cfg = self.cfg
            if streaming:
                cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, micro_batches=require_batches))
            self._trainers[key] = Trainer(cfg, self.setup.actor, device, streaming, use_rollout_log_probs,
                                          prepare=self._prepare)
        t = self._trainers[key]
        t.updates = 0
        return t


class Trainer:
    """`train_step(state, micro_batches) -> (state, metrics)`; see the module docstring.

    `updates` counts updates done (update u uses `iteration_keys(seed, u)[1]`); a resumed run
    sets it. `update_fn(rng, state, batch)` overrides the jitted `learner.update` (the async
    loop passes the synchronous loop's own sharded, donated one).
    """

    def __init__(self, cfg: TrainConfig, actor: actors.Actor, device: Any, streaming: bool,
                 use_rollout_log_probs: bool, prepare=None, update_fn=None, ref_params: Any = None):
        if streaming:
            check_streaming(cfg)
        if cfg.rl.kl_coef > 0 and ref_params is None:
            raise ValueError("rl.kl_coef > 0 needs the reference policy's params (ref_params)")
        self.cfg, self.device, self.streaming = cfg, device, streaming
        self.ref_params = ref_params if cfg.rl.kl_coef > 0 else None
        self._ref = jax.jit(functools.partial(learner.with_reference, actor.logp_value))
        self.prepare = prepare
        self.updates = 0
        lv = actor.logp_value
        self.update_fn = update_fn or jax.jit(functools.partial(learner.update, cfg.rl, lv), donate_argnums=(1,))
        self._prox = None if use_rollout_log_probs else jax.jit(
            lambda p, b, k: b | {"prox_logp": learner.recompute_log_probs(lv, p, b, k)[0]})

        def grads(params, batch, key):
            g, m = learner.compute_gradients(cfg.rl, lv, params, batch, key, normalizer=1.0)
            return g, m, jnp.sum(jnp.asarray(batch["mask"], jnp.float32))

        def finish(state, g, m, count):
            scale = 1.0 / jnp.maximum(count, 1.0)
            g = jax.tree.map(lambda x: x * scale, g)
            m = {k: (v if k.endswith("_max") else v * scale) for k, v in m.items()}
            # target_kl as in `learner.update`'s single minibatch: over it, the update is not applied
            over_kl = (cfg.rl.target_kl > 0) & (m["approx_kl"] > cfg.rl.target_kl)
            state, m = learner.apply_gradients(state, g, m, skip=over_kl)
            applied = m.pop("applied")
            return state, m | {"kl_stopped": over_kl.astype(jnp.float32), "updates": applied}

        def add(a, b):  # (grads, metrics, count): sums, but maxima stay maxima
            m = {k: (jnp.maximum(v, b[1][k]) if k.endswith("_max") else v + b[1][k]) for k, v in a[1].items()}
            return jax.tree.map(jnp.add, a[0], b[0]), m, a[2] + b[2]

        self._grads = jax.jit(grads)
        self._add = jax.jit(add)
        self._finish = jax.jit(finish, donate_argnums=(0,))

    def _batch(self, item) -> dict:
        data = item.data
        if self.device is not None:
            data = jax.device_put(data, self.device)
        data = self.prepare(data) if self.prepare is not None else data
        return learner.critic_warmup(self.cfg.rl, self.updates, data)  # as in the synchronous loop

    def __call__(self, state: TrainState, micro_batches) -> tuple[TrainState, dict]:
        k_update = iteration_keys(self.cfg.seed, self.updates)[1]
        if not self.streaming:
            batches = [self._batch(it) for it in micro_batches]
            batch = batches[0] if len(batches) == 1 else jax.tree.map(lambda *xs: jnp.concatenate(xs), *batches)
            if self._prox is not None:
                batch = self._prox(state.params, batch, jax.random.fold_in(k_update, 7))
            if self.ref_params is not None:
                batch = self._ref(self.ref_params, batch, jax.random.fold_in(k_update, learner.REF_STREAM))
            state, metrics = self.update_fn(k_update, state, batch)
        else:
            acc = None
            for i, item in enumerate(micro_batches):  # forward/backward starts on the first arrival
                batch = self._batch(item)
                key = jax.random.fold_in(k_update, i)
                if self._prox is not None:
                    batch = self._prox(state.params, batch, jax.random.fold_in(key, 7))
                if self.ref_params is not None:
                    batch = self._ref(self.ref_params, batch, jax.random.fold_in(key, learner.REF_STREAM))
                out = self._grads(state.params, batch, key)
                acc = out if acc is None else self._add(acc, out)
            state, metrics = self._finish(state, *acc)
        self.updates += 1
        host = {k: float(v) for k, v in jax.device_get(metrics).items()}
        learner.check_finite(host, self.updates)
        return state, host
