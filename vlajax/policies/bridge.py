"""The bridge between the simulator and the VLA: env observations in, robot actions out.

Every consumer of a trained policy (closed-loop eval, the RL rollout, demos replay) goes
through one `Bridge`. It holds only constants (the model config, the camera names, the
dataset's normalization statistics and the tokenized instructions of every task), so its
methods are pure and jittable; close over the bridge, never pass it as a traced argument.

    bridge = Bridge.from_data(cfg, info)              # training: from the loader's DataInfo
    bridge = Bridge.load(ckpt_dir)                    # eval / RL: from <ckpt_dir>/policy.json
    obs = bridge.observation(state.obs, task_id)      # -> models.Observation (normalized)
    obs = bridge.observation_from_state(state)        # same, task ids from state.info['episode']
    tokens, mask = bridge.encode_instructions(["put the red cube in the bowl"])  # free text
    obs = bridge.observation({**env_obs, "tokens": tokens, "token_mask": mask})  # no task ids
    actions = bridge.act(model, variables, state, rng)  # -> env actions float32 [B, H, 4] in [-1, 1]
    actions, sample = bridge.sample(model, variables, env_obs, rng, deterministic=True)  # the one sampler
    env_actions = bridge.env_actions(model_actions, env_obs)  # normalized [B, H, A] -> robot [B, H, 4]

Conventions (the same as training, see `vlajax.data.build.make_transform`):
  images    env `pixels/<camera>` uint8 [B, h, w, 3] -> float32 [0, 1], resized to
            `model.image_size` if needed; cameras = the ones the model was trained on.
  text      `env.instructions[instruction_id]` of task `task_id`, tokenized by the packaged
            tokenizer (`vlajax.models.tokenizer`) to `model.max_text_len` (a table lookup);
            or any free-text instruction through `encode_instructions` (the same tokenizer), passed
            as `env_obs['tokens']` / `env_obs['token_mask']` (then no task ids are needed).
  state     env `state` [B, 8] normalized with the dataset stats (`data.state_norm`), padded
            to `model.state_dim`.
  π0/π0.5   (model.family 'pi0' | 'pi05') images resized with pad into openpi's camera slots
            (`camera_map`), SentencePiece prompts (π0.5: with the discretized state, per step),
            state padded to `model.state_dim`: `vlajax.policies.pi`.
  actions   model actions [B, H, A] (normalized) -> unnormalized with the dataset stats
            (`data.action_norm`), first `env_action_dim` dims, clipped to [-1, 1].
  openpi    an imported openpi policy (`openpi`: `vlajax.config.openpi.OpenpiTransforms`) reads
            the robot's raw keys too (LIBERO: `observation/image`, `observation/wrist_image`
            uint8 [B, h, w, 3], `observation/state` [B, 8]) and answers as openpi's `Policy.infer`:
            the robot's state transform, its norm stats, resize with pad (rounded to uint8 as
            openpi), its prompt format; actions unnormalized, AbsoluteActions on `delta_mask`
            with the robot's state, the robot's action dims, not clipped.
  noise     `env_obs['noise']` float [B, H, model.action_dim], when present, is the flow's starting
            noise (openpi's `infer(obs, noise=...)`); else x_1 follows `model.flow_x1` (N(0, I)
            for imported policies, drawn from `rng`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.openpi import OpenpiTransforms
from vlajax.config.schema import ModelConfig, action_norm
from vlajax.data.normalize import NormStats, unnormalize
from vlajax.models import heads
from vlajax.models.observation import Observation
from vlajax.shared.atomic_files import write_json

__all__ = ["Bridge", "POLICY_FILE", "instruction_table"]

POLICY_FILE = "policy.json"
EPS = 1e-6


def instruction_table(max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens int32 [num_tasks, num_instructions, max_len] and mask bool [...] for every task's
    `instructions()` (indexed by `tasks.TASKS` position and the env's `instruction_id`)."""
    from vlajax.envs.tabletop import tasks
    from vlajax.models.tokenizer import encode_batch

    per_task = [encode_batch(t.instructions(), max_len) for t in tasks.TASKS]
    n = max(len(p[0]) for p in per_task)
    ids = np.zeros((len(per_task), n, max_len), np.int32)
    mask = np.zeros((len(per_task), n, max_len), bool)
    for i, (t, m) in enumerate(per_task):
        ids[i, : len(t)], mask[i, : len(m)] = t, m
    return ids, mask


_STATS = ("mean", "std", "q01", "q99", "min", "max")  # min/max optional (older policy.json lack them)


def _stats_to_json(s: NormStats) -> dict[str, list[float]]:
    return {k: np.asarray(getattr(s, k), np.float64).tolist() for k in _STATS if getattr(s, k) is not None}


def _stats_from_json(d: dict) -> NormStats:
    return NormStats(**{k: np.asarray(d[k], np.float32) for k in _STATS if k in d})


@dataclasses.dataclass(frozen=True, eq=False)
class Bridge:
    """Env observation -> `Observation`, model actions -> env actions (see the module docstring)."""

    model: ModelConfig
    cameras: tuple[str, ...]  # cameras the model reads (sorted); env keys are 'pixels/<camera>'
    norm: dict[str, NormStats]  # 'actions', 'state': the training dataset's statistics
    action_norm: str = "quantile"
    state_norm: str = "mean_std"
    env_action_dim: int = 4  # dims sent to the env: the first ones of model.action_dim, as many as the data has
    camera_map: tuple[tuple[str, str], ...] = ()  # pi families: (env camera, openpi image slot) pairs
    openpi: OpenpiTransforms | None = None  # an imported openpi policy's data transforms (None: our own)

    def __post_init__(self):
        if tuple(sorted(self.cameras)) != tuple(self.cameras):
            raise ValueError(f"Bridge.cameras must be sorted (the model reads them sorted): {self.cameras}")
        if set(self.norm) != {"actions", "state"}:
            raise ValueError(f"Bridge.norm needs 'actions' and 'state' statistics, got {sorted(self.norm)}")
        object.__setattr__(self, "camera_map", tuple(tuple(p) for p in self.camera_map))
        object.__setattr__(self, "_pi", None)
        if getattr(self.model, "family", "vla") != "vla":
            from vlajax.envs.tabletop import tasks
            from vlajax.policies.pi import PiInputs

            state_dims = int(np.shape(self.norm["state"].mean)[-1])
            optional = self.openpi.keys.optional if self.openpi is not None else ()
            object.__setattr__(self, "_pi", PiInputs(self.model, self.cameras, self.camera_map,
                                                     [list(t.instructions()) for t in tasks.TASKS], state_dims,
                                                     optional))
            return
        ids, mask = instruction_table(self.model.max_text_len)
        object.__setattr__(self, "_tokens", ids)
        object.__setattr__(self, "_token_mask", mask)

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_data(cls, cfg, info) -> Bridge:
        """From a `TrainConfig` and the `DataInfo` of its loader (`vlajax.data.make_loader`)."""
        cmap = ()
        if getattr(cfg.model, "family", "vla") != "vla":
            from vlajax.data.openpi import camera_map, model_slots

            cmap = camera_map(cfg.data.camera_map, tuple(info.cameras), model_slots(cfg.model))
        robot_dims = int(np.shape(info.norm["actions"].mean)[-1])  # the dataset's actions: the robot's dims
        return cls(cfg.model, tuple(info.cameras), dict(info.norm), action_norm(cfg), cfg.data.state_norm,
                   env_action_dim=min(cfg.model.action_dim, robot_dims), camera_map=cmap)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": dataclasses.asdict(self.model),
            "cameras": list(self.cameras),
            "norm": {k: _stats_to_json(v) for k, v in self.norm.items()},
            "action_norm": self.action_norm,
            "state_norm": self.state_norm,
            "env_action_dim": self.env_action_dim,
            "camera_map": [list(p) for p in self.camera_map],
            **({"openpi": self.openpi.to_json()} if self.openpi is not None else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Bridge:
        return cls(ModelConfig(**d["model"]), tuple(d["cameras"]),
                   {k: _stats_from_json(v) for k, v in d["norm"].items()},
                   d["action_norm"], d["state_norm"], int(d.get("env_action_dim", 4)),
                   tuple(tuple(p) for p in d.get("camera_map", ())),
                   OpenpiTransforms.from_json(d["openpi"]) if d.get("openpi") else None)

    def save(self, directory: str) -> str:
        """Write `<directory>/policy.json` atomically. -> its path."""
        os.makedirs(directory, exist_ok=True)
        return write_json(os.path.join(directory, POLICY_FILE), self.to_json())

    @classmethod
    def load(cls, directory: str) -> Bridge:
        """From `<directory>/policy.json` (a checkpoint directory written by SFT)."""
        path = os.path.join(directory, POLICY_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: missing (a checkpoint directory written by `vlajax.train sft` has it)")
        with open(path) as f:
            return cls.from_json(json.load(f))

    # ---------------------------------------------------------------- inputs

    def tokens(self, task_id, instruction_id) -> tuple[jax.Array, jax.Array]:
        """Instruction tokens int32 [B, L] and mask bool [B, L] (ids: int [B], may be traced)."""
        tid = jnp.asarray(task_id, jnp.int32)
        iid = jnp.asarray(instruction_id, jnp.int32)
        return jnp.asarray(self._tokens)[tid, iid], jnp.asarray(self._token_mask)[tid, iid]

    def encode_instructions(self, texts, env_obs: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Free-text instructions [B] -> tokens int32 [B, max_text_len], mask bool [B, max_text_len].

        π families: openpi's prompt format with the SentencePiece model (an empty or None text takes
        the openpi config's default prompt); π0.5 with the state in the prompt needs `env_obs`, the
        batched observation (raw robot keys or ours) whose state is normalized as `observation`
        normalizes it. Others: the packaged byte tokenizer."""
        texts = list(texts)
        if self._pi is None:
            from vlajax.models.tokenizer import encode_batch

            return encode_batch(texts, self.model.max_text_len)
        default = self.openpi.default_prompt if self.openpi is not None else ""
        texts = [t if t else default for t in texts]
        if not all(texts):
            raise ValueError("the policy needs a prompt (its openpi config has no default prompt)")
        normalized = None
        if self._pi.table is not None:
            if env_obs is None:
                raise ValueError("this π0.5 policy puts the state in the prompt: encode_instructions needs the "
                                 "observation (its state)")
            state = self.openpi.env_view(env_obs)["state"] if self.openpi is not None else env_obs["state"]
            normalized = np.asarray(self.normalize_state(state, pad=False))
        return self._pi.encode(texts, normalized)

    def normalize_state(self, state, pad: bool = True) -> jax.Array:
        s = self.norm["state"]
        state = jnp.asarray(state, jnp.float32)
        wide = np.shape(s.mean)[-1] - state.shape[-1]  # stats of a padded state (an imported openpi
        if wide > 0:  # checkpoint without norm stats: 32 identity dims): zero-pad the env's state first
            state = jnp.pad(state, [(0, 0)] * (state.ndim - 1) + [(0, wide)])
        if self.state_norm == "mean_std":
            out = (state - s.mean) / (s.std + EPS)
        else:
            out = 2.0 * (state - s.q01) / (s.q99 - s.q01 + EPS) - 1.0
        if not pad:
            return out
        pad = self.model.state_dim - out.shape[-1]
        return jnp.pad(out, [(0, 0)] * (out.ndim - 1) + [(0, pad)]) if pad > 0 else out[..., : self.model.state_dim]

    def observation(self, env_obs: dict[str, jax.Array], task_id=None) -> Observation:
        """Batched pixels observation `{'pixels/<cam>': uint8 [B,h,w,3], 'state': [B,8],
        'instruction_id': int [B]}` and task ids int [B] (or a scalar) -> `Observation`.
        With `'tokens'` int32 [B, L] and `'token_mask'` bool [B, L] in `env_obs` (free text, see
        `encode_instructions`) the instruction ids and `task_id` are not used. An openpi policy
        also reads its robot's raw keys (module docstring)."""
        if self.openpi is not None:
            env_obs = self.openpi.env_view(env_obs)
        b = env_obs["state"].shape[0]
        if self._pi is not None:
            return self._pi_observation(env_obs, task_id, b)
        n = self.model.image_size
        images, masks = {}, {}
        for c in self.cameras:
            key = f"pixels/{c}"
            if key not in env_obs:
                raise KeyError(f"the policy reads camera {c!r} but the env observation has {sorted(env_obs)}")
            img = jnp.asarray(env_obs[key]).astype(jnp.float32) / 255.0
            if img.shape[1:3] != (n, n):
                img = jax.image.resize(img, (b, n, n, 3), "bilinear")
            images[c], masks[c] = img, jnp.ones((b,), bool)
        if "tokens" in env_obs:
            tokens, token_mask = jnp.asarray(env_obs["tokens"], jnp.int32), jnp.asarray(env_obs["token_mask"], bool)
        else:
            task_id = jnp.broadcast_to(jnp.asarray(task_id, jnp.int32), (b,))
            tokens, token_mask = self.tokens(task_id, env_obs["instruction_id"])
        return Observation(images, masks, tokens, token_mask, self.normalize_state(env_obs["state"]))

    def _pi_observation(self, env_obs, task_id, b: int) -> Observation:
        images, masks = self._pi.images(env_obs, self.cameras, b)
        raw = self.normalize_state(env_obs["state"], pad=False)
        if "tokens" in env_obs:
            tokens, token_mask = jnp.asarray(env_obs["tokens"], jnp.int32), jnp.asarray(env_obs["token_mask"], bool)
        else:
            task_id = jnp.broadcast_to(jnp.asarray(task_id, jnp.int32), (b,))
            tokens, token_mask = self._pi.tokens(task_id, env_obs["instruction_id"], raw)
        pad = self.model.state_dim - raw.shape[-1]
        return Observation(images, masks, tokens, token_mask, jnp.pad(raw, ((0, 0), (0, max(pad, 0)))))

    @property
    def model_cameras(self) -> tuple[str, ...]:
        """The image names the model reads (sorted): the cameras, or openpi's slots for the pi families."""
        if self._pi is None:
            return self.cameras
        from vlajax.data.openpi import model_slots

        return model_slots(self.model)

    def observation_from_state(self, state) -> Observation:
        """`observation(state.obs, state.info['episode']['task_id'])` for a batched env `State`."""
        return self.observation(state.obs, state.info["episode"]["task_id"])

    # ---------------------------------------------------------------- outputs

    def env_actions(self, actions, env_obs: dict | None = None) -> jax.Array:
        """Normalized model actions [B, H, A] -> env actions [B, H, env_action_dim] in [-1, 1].
        An openpi policy: the robot's actions (unnormalized, AbsoluteActions with the robot's
        state from `env_obs` where its config has a delta mask, not clipped)."""
        dims = np.shape(self.norm["actions"].mean)[-1]  # pi families: the model's padded dims are cut
        raw = unnormalize(jnp.asarray(actions, jnp.float32)[..., :dims], self.norm["actions"], self.action_norm)
        if self.openpi is not None:
            if self.openpi.delta_mask and env_obs is None:
                raise ValueError(f"openpi config {self.openpi.train_config!r} returns absolute actions: "
                                 "env_actions needs the observation (its state)")
            state = None if env_obs is None else self.openpi.env_view(env_obs)["state"]
            return self.openpi.robot_actions(raw, state)
        return jnp.clip(raw[..., : self.env_action_dim], -1.0, 1.0)

    def sample(self, model, variables, env_obs: dict, rng, *, task_id=None, deterministic: bool = True,
               temperature: float = 1.0):
        """The policy: env observation dict (batched) -> (env actions [B, H, env_action_dim], the
        head's sample: `heads.FlowSample` / `TokenSample`). deterministic: the ODE sampler (from
        Gaussian x_1 unless `model.flow_x1='zeros'`, or from `env_obs['noise']`) / argmax tokens;
        else the model's configured sampler. Eval, the policy server and the RL rollout call this."""
        obs = self.observation(env_obs, task_id)
        if self.model.action_head == "flow":
            out = heads.flow_sample(model, variables, obs, rng, sampler="ode" if deterministic else None,
                                    x1=env_obs.get("noise"))
        else:
            out = heads.token_sample(model, variables, obs, rng, temperature=0.0 if deterministic else temperature)
        return self.env_actions(out.actions, env_obs), out

    def act(self, model, variables, state_or_obs, rng, *, task_id=None, deterministic: bool = True) -> jax.Array:
        """Env actions float32 [B, H, env_action_dim] for a batched env `State` (or an env
        observation dict plus `task_id`). deterministic: the ODE sampler / argmax tokens."""
        if isinstance(state_or_obs, dict):
            env_obs = state_or_obs
        else:
            env_obs, task_id = state_or_obs.obs, state_or_obs.info["episode"]["task_id"]
        return self.sample(model, variables, env_obs, rng, task_id=task_id, deterministic=deterministic)[0]
