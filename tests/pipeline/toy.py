"""A tiny stand-in RL problem for the runner tests: a jittable point-mass env, a linear Gaussian
policy and REINFORCE with SGD (momentum). Real JAX, small enough for the 2-core CPU.

Shapes: envs B=8, obs 4, action 2, T=4 decisions per sample_step; one Trajectory per call is
one micro-batch of B samples with data {'obs': [T, B, 4], 'act': [T, B, 2], 'rew': [T, B]}.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vlajax.pipeline.buffer import Trajectory
from vlajax.training.train_state import TrainState

B, OBS, ACT, T = 8, 4, 2, 4
STD = 0.5


def init_state(seed: int = 0, lr: float = 0.05) -> TrainState:
    key = jax.random.key(seed)
    params = {"w": 0.1 * jax.random.normal(key, (OBS, ACT)), "b": jnp.zeros((ACT,))}
    return TrainState.create(params, optax.sgd(lr, momentum=0.9), jax.random.fold_in(key, 1))


def _env_step(params, x, k):
    """x: [B, OBS] -> next x, (obs, act, rew)."""
    mean = x @ params["w"] + params["b"]
    a = mean + STD * jax.random.normal(k, mean.shape)
    x_next = 0.9 * x + 0.3 * jnp.pad(a, ((0, 0), (0, OBS - ACT))) + 0.05 * jax.random.normal(
        jax.random.fold_in(k, 7), x.shape)
    return x_next, (x, a, -jnp.sum(x_next**2, -1))


@jax.jit
def _unroll(params, x, key):
    x, (obs, act, rew) = jax.lax.scan(lambda c, k: _env_step(params, c, k), x, jax.random.split(key, T))
    return x, {"obs": obs, "act": act, "rew": rew}


_one_step = jax.jit(_env_step)


class ToySampler:
    """sample_step(version, params, call) -> [Trajectory]; env state carried across calls.

    partial=ParamServer: read the newest weights before every decision (partial rollout), so
    one trajectory can mix versions. decision_s: wall time added per decision (a slow simulator).
    """

    def __init__(self, seed: int = 0, partial=None, decision_s: float = 0.0, call_s: float = 0.0):
        self.key = jax.random.key(seed + 100)
        self.x = 2.0 * jax.random.normal(jax.random.fold_in(self.key, 10**6), (B, OBS))
        self.partial, self.decision_s, self.call_s = partial, decision_s, call_s
        self.calls: list[tuple[int, int]] = []  # (call, version)

    def __call__(self, version, params, call):
        self.calls.append((call, version))
        key = jax.random.fold_in(self.key, call)
        x = jax.device_put(self.x, params["w"].sharding)  # the env lives where the rollout weights live
        if self.partial is None and not self.decision_s:
            self.x, data = _unroll(params, x, key)
            versions = np.full((T,), version)
        else:
            obs, act, rew, versions = [], [], [], []
            for t, k in enumerate(jax.random.split(key, T)):
                if self.partial is not None and t > 0:
                    version, params = self.partial.latest()
                x, (o, a, r) = _one_step(params, x, k)
                obs.append(o), act.append(a), rew.append(r), versions.append(version)
                time.sleep(self.decision_s)
            self.x = x
            data = {"obs": jnp.stack(obs), "act": jnp.stack(act), "rew": jnp.stack(rew)}
        time.sleep(self.call_s)
        jax.block_until_ready(data)
        return [Trajectory(data, versions=np.asarray(versions), num_samples=B, env_steps=B * T)]


def _loss(params, batch):
    mean = batch["obs"] @ params["w"] + params["b"]
    logp = -0.5 * jnp.sum(((batch["act"] - mean) / STD) ** 2, -1)
    adv = batch["rew"] - batch["rew"].mean()
    return -jnp.mean(logp * jax.lax.stop_gradient(adv))


_grad = jax.jit(jax.grad(_loss))
_add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))
_apply = jax.jit(lambda s, g, n: s.apply_gradients(jax.tree.map(lambda x: x / n, g)), donate_argnums=0)


class ToyTrainer:
    """train_step(state, micro_batches) -> (state, metrics): accumulate grads, one SGD update.

    Records when each micro-batch arrived (`arrivals`), to observe streaming.
    """

    def __init__(self, device=None, update_s: float = 0.0):
        self.device, self.update_s = device, update_s
        self.arrivals: list[list[float]] = []

    def __call__(self, state, micro_batches):
        acc, n, times = None, 0, []
        for item in micro_batches:
            times.append(time.monotonic())
            data = item.data if self.device is None else jax.device_put(item.data, self.device)
            g = _grad(state.params, data)
            acc = g if acc is None else _add(acc, g)
            n += 1
        self.arrivals.append(times)
        state = _apply(state, acc, float(n))
        time.sleep(self.update_s)
        return state, {"micro_batches": n}


def get_params(state):
    return state.params
