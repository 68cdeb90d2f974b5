"""The bridge between the simulator and the VLA: env observations in, robot actions out.

Every consumer of a trained policy (closed-loop eval, the RL rollout, the policy server,
`vlajax.Policy`) goes through one `Bridge`. It holds only constants (the model config, the camera
names, the dataset's normalization statistics, the tokenized instructions of every task), so its
transforms are pure and jittable; close over the bridge, never pass it as a traced argument.

    bridge = Bridge.from_data(cfg, info)              # training: from the loader's DataInfo
    bridge = Bridge.load(ckpt_dir)                    # eval / RL: from <ckpt_dir>/policy.json
    obs = bridge.observation(state.obs, task_id)      # -> models.Observation (normalized)
    obs = bridge.observation_from_state(state)        # same, task ids from state.info['episode']
    tokens, mask = bridge.encode_instructions(["put the red cube in the bowl"])  # free text
    obs = bridge.observation({**env_obs, "tokens": tokens, "token_mask": mask})  # no task ids
    actions = bridge.act(model, variables, state, rng)  # -> env actions float32 [B, H, 4] in [-1, 1]
    actions, sample = bridge.sample(model, variables, env_obs, rng, deterministic=True)  # the one sampler
    env_actions = bridge.env_actions(model_actions, env_obs)  # normalized [B, H, A] -> robot [B, H, 4]

A policy is data: `policy.json` (this record: model config, cameras, norm stats, action dims,
camera map, an imported policy's openpi record) and, built from it per model family, its ordered
transform list `bridge.transforms` (a `vlajax.policies.transforms.Group`; `bridge.describe()`
prints it). `sample` only runs it: prompt (host) -> robot -> inputs -> the model's sampler ->
outputs. The same chain serves eval, the policy server, the RL rollout (inside its jit) and
`vlajax.Policy`; training builds the same inputs (`vlajax.data.build.make_transform`).

  vla     prompt:  ByteTokenizePrompt (free text; else a task's instructions are a table lookup)
          inputs:  CameraImages ('pixels/<camera>' uint8 -> float32 [0, 1], resized to model.image_size)
                   -> TaskTokens -> NormalizeState (data.state_norm) -> PadState (model.state_dim)
          outputs: Unnormalize (data.action_norm) -> KeepDims (env_action_dim) -> Clip [-1, 1]
  pi0/05  prompt:  TokenizePrompt (SentencePiece, openpi's format; π0.5: the discretized state)
          inputs:  SlotImages (resize with pad into openpi's slots, `camera_map`) -> NormalizeState
                   -> PromptTokens (per step for π0.5) -> PadState
          outputs: as vla
  openpi  an imported openpi policy (`openpi`: `vlajax.config.openpi.OpenpiTransforms`), answering as
          openpi's `Policy.infer` on the robot's raw keys (`vlajax.shared.robots`):
          prompt:  InjectDefaultPrompt -> TokenizePrompt
          robot:   RobotInputs (raw keys -> ours; the robot's state transform)
          inputs:  as pi0/05 (its norm stats; images rounded to uint8 as openpi)
          outputs: Unnormalize -> [AbsoluteActions on `delta_mask`, with the robot's state]
                   -> RobotOutputs (the robot's action dims, not clipped)

`env_obs['noise']` float [B, H, model.action_dim], when present, is the flow's starting noise
(openpi's `infer(obs, noise=...)`); else x_1 follows `model.flow_x1` (N(0, I) for imported
policies, drawn from `rng`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import numpy as np

from vlajax.config.openpi import OpenpiTransforms
from vlajax.config.schema import ModelConfig, action_norm
from vlajax.data.normalize import NormStats
from vlajax.data.openpi import camera_map, model_slots
from vlajax.models.observation import Observation
from vlajax.models.policy import head_sample
from vlajax.models.tokenizer import encode_batch
from vlajax.policies.pi import PiPrompts, PromptTokens, SlotImages, TokenizePrompt
from vlajax.policies.transforms import (
    AbsoluteActions,
    ByteTokenizePrompt,
    CameraImages,
    Clip,
    Group,
    InjectDefaultPrompt,
    KeepDims,
    NormalizeState,
    PadState,
    RobotInputs,
    RobotOutputs,
    TaskTokens,
    Unnormalize,
    compose,
)
from vlajax.shared.atomic_files import write_json
from vlajax.shared.robots import NOISE, PROMPT, STATE, TABLETOP_ACTION_DIMS, TOKEN_MASK, TOKENS

__all__ = ["Bridge", "POLICY_FILE", "instruction_table"]

POLICY_FILE = "policy.json"


def instruction_table(max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens int32 [num_tasks, num_instructions, max_len] and mask bool [...] for every task's
    `instructions()` (indexed by `tasks.TASKS` position and the env's `instruction_id`)."""
    from vlajax.envs.tabletop import tasks  # lazy: vlajax.envs loads MuJoCo / MJX-Warp (~3 s), not needed to import

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
    env_action_dim: int = 4  # dims sent to the env: the first ones of model.action_dim, as many as it takes
    camera_map: tuple[tuple[str, str], ...] = ()  # pi families: (env camera, openpi image slot) pairs
    openpi: OpenpiTransforms | None = None  # an imported openpi policy's data transforms (None: our own)

    def __post_init__(self):
        if tuple(sorted(self.cameras)) != tuple(self.cameras):
            raise ValueError(f"Bridge.cameras must be sorted (the model reads them sorted): {self.cameras}")
        if set(self.norm) != {"actions", "state"}:
            raise ValueError(f"Bridge.norm needs 'actions' and 'state' statistics, got {sorted(self.norm)}")
        object.__setattr__(self, "camera_map", tuple(tuple(p) for p in self.camera_map))
        object.__setattr__(self, "transforms", self._transforms())

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_data(cls, cfg, info) -> Bridge:
        """From a `TrainConfig` and the `DataInfo` of its loader (`vlajax.data.make_loader`)."""
        cmap = ()
        if cfg.model.family != "vla":
            cmap = camera_map(cfg.data.camera_map, tuple(info.cameras), model_slots(cfg.model))
        # the env the config names takes the actions: a LIBERO suite the dataset's dims (7 for openpi's LIBERO
        # layout), the tabletop its 4 (the first dims of a policy trained on wider data)
        libero = cfg.env.suite.startswith("libero_")
        robot_dims = int(np.shape(info.norm["actions"].mean)[-1]) if libero else TABLETOP_ACTION_DIMS
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

    # ---------------------------------------------------------------- the transform list

    def _transforms(self) -> Group:
        """The policy's transforms, per model family (module docstring; `describe()` prints them)."""
        m = self.model
        norm_state = NormalizeState(self.norm["state"], self.state_norm)
        unnorm = Unnormalize(self.norm["actions"], self.action_norm)
        robot = (RobotInputs(self.openpi),) if self.openpi is not None else ()
        if m.family == "vla":
            ids, mask = instruction_table(m.max_text_len)
            return Group(prompt=(ByteTokenizePrompt(m.max_text_len),), robot=robot,
                         inputs=(CameraImages(self.cameras, m.image_size), TaskTokens(ids, mask), norm_state,
                                 PadState(m.state_dim)),
                         outputs=(unnorm, KeepDims(self.env_action_dim), Clip()))
        from vlajax.envs.tabletop import tasks  # lazy, as in instruction_table

        prompts = PiPrompts(m, [list(t.instructions()) for t in tasks.TASKS],
                            int(np.shape(self.norm["state"].mean)[-1]))
        optional = self.openpi.keys.optional if self.openpi is not None else ()
        inputs = (SlotImages(self.cameras, self.camera_map, model_slots(m), m.image_size, optional), norm_state,
                  PromptTokens(prompts), PadState(m.state_dim))
        tokenize = TokenizePrompt(prompts, (*robot, norm_state))
        if self.openpi is None:
            return Group(prompt=(tokenize,), inputs=inputs, outputs=(unnorm, KeepDims(self.env_action_dim), Clip()))
        absolute = (AbsoluteActions(self.openpi),) if self.openpi.delta_mask else ()
        return Group(prompt=(InjectDefaultPrompt(self.openpi.default_prompt), tokenize), robot=robot, inputs=inputs,
                     outputs=(unnorm, *absolute, RobotOutputs(self.openpi)))

    def describe(self) -> dict[str, list[str]]:
        """The transform list as data: {'prompt' | 'robot' | 'inputs' | 'outputs': ['Step(settings)', ...]}."""
        return self.transforms.describe()

    # ---------------------------------------------------------------- inputs

    def encode_instructions(self, texts, env_obs: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Free-text instructions [B] -> tokens int32 [B, max_text_len], mask bool [B, max_text_len]:
        the `prompt` group on the host. π families: openpi's prompt format with the SentencePiece model
        (an empty or None text takes the openpi config's default prompt); π0.5 with the state in the
        prompt needs `env_obs`, the batched observation (raw robot keys or ours). Others: the packaged
        byte tokenizer."""
        out = compose(self.transforms.prompt, {**(env_obs or {}), PROMPT: list(texts)})
        return out[TOKENS], out[TOKEN_MASK]

    def robot_view(self, env_obs: dict) -> dict:
        """The `robot` group: a robot's raw keys -> our env keys (identity for our own policies)."""
        return compose(self.transforms.robot, dict(env_obs))

    def observation(self, env_obs: dict[str, jax.Array], task_id=None) -> Observation:
        """Batched pixels observation `{'pixels/<cam>': uint8 [B,h,w,3], 'state': [B,8],
        'instruction_id': int [B]}` and task ids int [B] (or a scalar) -> `Observation`: the `robot`
        and `inputs` groups. With `'tokens'` int32 [B, L] and `'token_mask'` bool [B, L] in `env_obs`
        (free text, see `encode_instructions`) the instruction ids and `task_id` are not used. An
        openpi policy also reads its robot's raw keys (module docstring)."""
        return self._observation(self.robot_view(env_obs), task_id)

    def _observation(self, view: dict, task_id) -> Observation:
        data = compose(self.transforms.inputs, view if task_id is None else {**view, "task_id": task_id})
        return Observation(data["images"], data["image_masks"], data[TOKENS], data[TOKEN_MASK], data[STATE])

    @property
    def model_cameras(self) -> tuple[str, ...]:
        """The image names the model reads (sorted): the cameras, or openpi's slots for the pi families."""
        return self.cameras if self.model.family == "vla" else model_slots(self.model)

    def observation_from_state(self, state) -> Observation:
        """`observation(state.obs, state.info['episode']['task_id'])` for a batched env `State`."""
        return self.observation(state.obs, state.info["episode"]["task_id"])

    # ---------------------------------------------------------------- outputs

    def env_actions(self, actions, env_obs: dict | None = None) -> jax.Array:
        """Normalized model actions [B, H, A] -> env actions [B, H, env_action_dim] in [-1, 1]: the
        `outputs` group. An openpi policy: the robot's actions (unnormalized, AbsoluteActions with the
        robot's state from `env_obs` where its config has a delta mask, not clipped)."""
        state = None if env_obs is None or self.openpi is None else self.robot_view(env_obs)[STATE]
        return compose(self.transforms.outputs, {"actions": actions, STATE: state})["actions"]

    def sample(self, model, variables, env_obs: dict, rng, *, task_id=None, deterministic: bool = True,
               temperature: float = 1.0):
        """The policy: env observation dict (batched) -> (env actions [B, H, env_action_dim], the
        head's sample: `heads.FlowSample` / `TokenSample`): robot -> inputs -> the model's one sampler
        (`vlajax.models.policy.head_sample`) -> outputs. deterministic: the ODE sampler (from Gaussian
        x_1 unless `model.flow_x1='zeros'`, or from `env_obs['noise']`) / argmax tokens; else the
        model's configured sampler. Eval, the policy server, the RL rollout and `vlajax.Policy` call this."""
        view = self.robot_view(env_obs)
        out = head_sample(model, variables, self._observation(view, task_id), rng, deterministic=deterministic,
                          temperature=temperature, x1=env_obs.get(NOISE))
        state = view[STATE] if self.openpi is not None else None
        return compose(self.transforms.outputs, {"actions": out.actions, STATE: state})["actions"], out

    def act(self, model, variables, state_or_obs, rng, *, task_id=None, deterministic: bool = True) -> jax.Array:
        """Env actions float32 [B, H, env_action_dim] for a batched env `State` (or an env
        observation dict plus `task_id`). deterministic: the ODE sampler / argmax tokens."""
        if isinstance(state_or_obs, dict):
            env_obs = state_or_obs
        else:
            env_obs, task_id = state_or_obs.obs, state_or_obs.info["episode"]["task_id"]
        return self.sample(model, variables, env_obs, rng, task_id=task_id, deterministic=deterministic)[0]
