"""A policy directory as openpi's `Policy`: raw observations in, robot actions out, in-process.

    from vlajax.policies.policy import Policy
    policy = Policy.load("runs/pi05-libero")         # any policy directory (imported, SFT, RL)
    out = policy.infer({"observation/image": img,     # uint8 [h, w, 3], any size (resized with pad)
                        "observation/wrist_image": wrist,
                        "observation/state": state,   # float [8]
                        "prompt": "pick up the black bowl"})
    out["actions"]                                    # float32 [H, 7]: openpi's Policy.infer(obs)["actions"]
    policy.infer(obs, noise=noise)                    # noise float [H, 32]: the flow's starting noise
    out = policy.infer_batch({"observation/image": imgs,             # uint8 [B, h, w, 3]
                              "observation/wrist_image": wrists,     # uint8 [B, h, w, 3]
                              "observation/state": states,           # float [B, 8]
                              "prompt": ["...", ...]})               # B strings
    out["actions"]                                    # float32 [B, H, 7]

The keys are the policy's robot's (`vlajax.config.openpi.ROBOTS`: LIBERO's above; DROID's, ALOHA's)
for an imported openpi policy, or our env's (`pixels/<camera>`, `state`) for any policy. The
prompts are tokenized on the host (the policy's `prompt` transforms, `Bridge.encode_instructions`);
everything else is one jitted call of `Bridge.sample` -- its robot, inputs and outputs transforms
around the model's sampler, the chain eval, the policy server and the RL rollout run -- traced
once per set of input shapes. Without `noise` the flow starts from Gaussian noise drawn from
`fold_in(key(seed), call)` (the ODE sampler, as openpi's `sample_actions`); with `deterministic=False`
the model's own (RL) sampler.
"""

from __future__ import annotations

import threading
from typing import Any

import jax
import numpy as np

from vlajax.config.schema import TrainConfig
from vlajax.policies.run_files import load_policy
from vlajax.shared.robots import NOISE, PROMPT, TOKEN_MASK, TOKENS

__all__ = ["Policy"]


class Policy:
    """A loaded policy with openpi's `infer` (module docstring). Thread-safe."""

    def __init__(self, bridge, model, params, *, seed: int = 0, deterministic: bool = True, info: dict | None = None,
                 device: jax.Device | None = None):
        self.bridge, self.model = bridge, model
        # one copy on one device (as each server replica): a policy restored onto a mesh would otherwise
        # run every call as a sharded program with collectives
        self.params = jax.device_put(jax.device_get(params), device or jax.local_devices()[0])
        self.seed, self.deterministic = seed, deterministic
        self.calls = 0
        self._lock = threading.Lock()
        self._info = dict(info or {})

        def sample(params, env_obs, k):
            rng = jax.random.fold_in(jax.random.key(seed), k)
            return bridge.sample(model, {"params": params}, env_obs, rng, deterministic=deterministic)[0]

        self._sample = jax.jit(sample)

    @classmethod
    def load(cls, directory: str, *, step: int | None = None, seed: int = 0, deterministic: bool = True) -> Policy:
        """From a policy directory (`vlajax.load_policy`: imported, SFT, RL, async RL)."""
        bridge, model, params, cfg, done = load_policy(directory, TrainConfig(), step)
        return cls(bridge, model, params, seed=seed, deterministic=deterministic,
                   info={"directory": directory, "step": done, "config": cfg.name})

    @property
    def metadata(self) -> dict[str, Any]:
        """What a client should know: the action shape and whether answers are deterministic."""
        b, m = self.bridge, self.model.cfg
        return {**self._info, "action": {"shape": [m.action_horizon, b.env_action_dim], "dtype": "float32"},
                "deterministic": deterministic_answers(b, self.deterministic),
                "openpi": None if b.openpi is None else b.openpi.to_json()}

    def infer(self, obs: dict, *, noise: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """One raw observation (unbatched arrays, `prompt` a string) -> {'actions': float32 [H, A]}."""
        obs = _flatten(obs)
        batch = {k: (v if k == "prompt" else np.asarray(v)[None]) for k, v in obs.items()}
        batch["prompt"] = [obs.get("prompt")]
        return {"actions": self.infer_batch(batch, noise=None if noise is None else np.asarray(noise)[None])[
            "actions"][0]}

    def infer_batch(self, obs: dict, *, noise: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Raw observations batched ([B, ...] arrays, `prompt` B strings) -> {'actions': float32 [B, H, A]};
        noise: float [B, H, model.action_dim] or None (Gaussian)."""
        obs = _flatten(obs)  # openpi's nested keys ({'images': {'cam_high': ...}}) as 'images/cam_high'
        env_obs = {k: np.asarray(v) for k, v in obs.items() if k not in (PROMPT, TOKENS, TOKEN_MASK, NOISE)}
        if TOKENS in obs:
            tokens, mask = np.asarray(obs[TOKENS], np.int32), np.asarray(obs[TOKEN_MASK], bool)
        else:
            prompts = obs.get(PROMPT)
            b = len(next(iter(env_obs.values())))
            prompts = [None] * b if prompts is None else [prompts] if isinstance(prompts, str) else list(prompts)
            tokens, mask = self.bridge.encode_instructions(prompts, env_obs)
        env_obs |= {TOKENS: tokens, TOKEN_MASK: mask}  # the prompt group ran on the host
        if noise is not None:
            m = self.model.cfg
            noise = np.asarray(noise, np.float32)
            if noise.shape[1:] != (m.action_horizon, m.action_dim):
                raise ValueError(f"noise has shape {noise.shape}; expected [B, {m.action_horizon}, {m.action_dim}]")
            env_obs[NOISE] = noise
        with self._lock:
            k = self.calls
            self.calls += 1
        out = self._sample(self.params, env_obs, np.uint32(k % (1 << 32)))
        return {"actions": np.asarray(out, np.float32)}


def _flatten(obs: dict, prefix: str = "") -> dict:
    """Nested observation dicts -> one level, keys joined with '/' (openpi's `flatten_dict`)."""
    out = {}
    for k, v in obs.items():
        if isinstance(v, dict):
            out |= _flatten(v, f"{prefix}{k}/")
        else:
            out[f"{prefix}{k}"] = v
    return out


def deterministic_answers(bridge, deterministic_sampler: bool) -> bool:
    """Whether the same observation always gets the same actions: a deterministic sampler (ODE /
    argmax) and, for the flow head, a fixed start (`model.flow_x1='zeros'`); Gaussian x_1 is drawn."""
    m = bridge.model
    return deterministic_sampler and (m.action_head != "flow" or m.flow_x1 == "zeros")
