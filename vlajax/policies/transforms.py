"""A policy's data transforms: small frozen records, each a jittable function of a dict (openpi's pattern).

A transform maps a dict of arrays to a new dict (the input is not changed); it holds only constants
(statistics, token tables, key names), so a chain of them traces into one program and a policy can
close over it inside `jit` (the RL rollout does). A policy is a `Group` of four ordered lists:

    prompt   host, before the jitted call: {'prompt': B strings, env keys} -> + 'tokens', 'token_mask'
    robot    a robot's raw keys -> our env keys ('pixels/<camera>', 'state'; `vlajax.shared.robots`)
    inputs   env keys (+ 'task_id') -> the model's inputs: 'images' {name: float32 [B, S, S, 3]},
             'image_masks' {name: bool [B]}, 'tokens' int32 [B, L], 'token_mask' bool [B, L],
             'state' float32 [B, model.state_dim]
    outputs  {'actions': normalized [B, H, A], 'state': the robot's state [B, S]} -> 'actions' as the
             robot takes them

`vlajax.policies.bridge` builds the group per model family from `policy.json` and runs it; `describe`
prints it. The π-family steps (images into openpi's slots, SentencePiece prompts) are in
`vlajax.policies.pi`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.openpi import OpenpiTransforms
from vlajax.data.normalize import NormStats, unnormalize
from vlajax.models.tokenizer import encode_batch
from vlajax.shared.robots import INSTRUCTION_ID, PROMPT, STATE, TOKEN_MASK, TOKENS, image_key

__all__ = ["AbsoluteActions", "ByteTokenizePrompt", "CameraImages", "Clip", "Group", "InjectDefaultPrompt",
           "KeepDims", "NormalizeState", "PadState", "RobotInputs", "RobotOutputs", "TaskTokens", "Transform",
           "Unnormalize", "compose", "describe"]

EPS = 1e-6


class Transform(Protocol):
    def __call__(self, data: dict[str, Any]) -> dict[str, Any]:
        """A new dict from `data` (batched arrays; jittable except in the `prompt` group)."""


@dataclasses.dataclass(frozen=True)
class Group:
    """A policy's transforms in the order they run (module docstring)."""

    prompt: tuple[Transform, ...] = ()
    robot: tuple[Transform, ...] = ()
    inputs: tuple[Transform, ...] = ()
    outputs: tuple[Transform, ...] = ()

    def describe(self) -> dict[str, list[str]]:
        """{group: [transform, ...]}: each step by name with its settings (not its arrays)."""
        return {f.name: [describe(t) for t in getattr(self, f.name)] for f in dataclasses.fields(self)}


def compose(transforms: Sequence[Transform], data: dict[str, Any]) -> dict[str, Any]:
    """Run `transforms` in order on `data`."""
    for t in transforms:
        data = t(data)
    return data


def describe(t: Transform) -> str:
    """'Name(field=value, ...)' of a transform's scalar and string fields (arrays and tables left out)."""
    shown = []
    for f in dataclasses.fields(t):
        v = getattr(t, f.name)
        if isinstance(v, (bool, int, float, str)) or (isinstance(v, tuple) and all(
                isinstance(x, (bool, int, float, str)) for x in v)):
            shown.append(f"{f.name}={v!r}")
        elif isinstance(v, OpenpiTransforms):
            shown.append(f"robot={v.robot!r}")
    return f"{type(t).__name__}({', '.join(shown)})"


# ------------------------------------------------------------------------------------------ prompt (host)


@dataclasses.dataclass(frozen=True)
class InjectDefaultPrompt:
    """An empty or missing prompt becomes `prompt` (openpi's InjectDefaultPrompt; '' = none)."""

    prompt: str

    def __call__(self, data):
        return {**data, PROMPT: [p if p else self.prompt for p in data[PROMPT]]}


@dataclasses.dataclass(frozen=True)
class ByteTokenizePrompt:
    """Prompts [B] -> tokens int32 [B, max_len], mask bool [B, max_len] (the packaged byte tokenizer,
    `vlajax.models.tokenizer`, what the small VLA trains with)."""

    max_len: int

    def __call__(self, data):
        tokens, mask = encode_batch(list(data[PROMPT]), self.max_len)
        return {**data, TOKENS: tokens, TOKEN_MASK: mask}


# ------------------------------------------------------------------------------------------ robot


@dataclasses.dataclass(frozen=True)
class RobotInputs:
    """An imported openpi policy's robot input transform (`OpenpiTransforms.env_view`): the robot's raw
    keys -> 'pixels/<camera>' uint8 [B, h, w, 3] and 'state' [B, S]; keys already in our form pass."""

    openpi: OpenpiTransforms

    def __call__(self, data):
        return self.openpi.env_view(data)


# ------------------------------------------------------------------------------------------ inputs


def batch_size(data) -> int:
    return data[STATE].shape[0]


def given_tokens(data):
    """A prompt tokenized on the host ('tokens' int32 [B, L], 'token_mask' bool [B, L]) as jnp arrays."""
    return {**data, TOKENS: jnp.asarray(data[TOKENS], jnp.int32), TOKEN_MASK: jnp.asarray(data[TOKEN_MASK], bool)}


@dataclasses.dataclass(frozen=True)
class CameraImages:
    """'pixels/<camera>' uint8 [B, h, w, 3] -> 'images' {camera: float32 [B, size, size, 3] in [0, 1]}
    (bilinear resize when the size differs), 'image_masks' {camera: True [B]}."""

    cameras: tuple[str, ...]
    size: int

    def __call__(self, data):
        b, n = batch_size(data), self.size
        images, masks = {}, {}
        for c in self.cameras:
            key = image_key(c)
            if key not in data:
                raise KeyError(f"the policy reads camera {c!r} but the env observation has {sorted(data)}")
            img = jnp.asarray(data[key]).astype(jnp.float32) / 255.0
            if img.shape[1:3] != (n, n):
                img = jax.image.resize(img, (b, n, n, 3), "bilinear")
            images[c], masks[c] = img, jnp.ones((b,), bool)
        return {**data, "images": images, "image_masks": masks}


@dataclasses.dataclass(frozen=True, eq=False)
class NormalizeState:
    """'state' [B, s] -> normalized [B, S] with the training data's statistics (S = their width: a
    narrower state is zero-padded first, as for an imported checkpoint's 32 identity dims).
    mode: 'mean_std' (z-score) or quantile (q01/q99 to [-1, 1])."""

    stats: NormStats
    mode: str

    def normalize(self, state) -> jax.Array:
        s = self.stats
        state = jnp.asarray(state, jnp.float32)
        wide = np.shape(s.mean)[-1] - state.shape[-1]
        if wide > 0:
            state = jnp.pad(state, [(0, 0)] * (state.ndim - 1) + [(0, wide)])
        if self.mode == "mean_std":
            return (state - s.mean) / (s.std + EPS)
        return 2.0 * (state - s.q01) / (s.q99 - s.q01 + EPS) - 1.0

    def __call__(self, data):
        return {**data, STATE: self.normalize(data[STATE])}


@dataclasses.dataclass(frozen=True, eq=False)
class TaskTokens:
    """Without 'tokens' in the data: the instruction tokens of ('task_id', 'instruction_id') (int [B] or a
    scalar task id, may be traced) from a table int32 [T, I, L] / bool [T, I, L]; given ones pass."""

    ids: np.ndarray
    mask: np.ndarray

    def __call__(self, data):
        if TOKENS in data:
            return given_tokens(data)
        tid = jnp.broadcast_to(jnp.asarray(data.get("task_id"), jnp.int32), (batch_size(data),))
        iid = jnp.asarray(data[INSTRUCTION_ID], jnp.int32)
        return {**data, TOKENS: jnp.asarray(self.ids)[tid, iid], TOKEN_MASK: jnp.asarray(self.mask)[tid, iid]}


@dataclasses.dataclass(frozen=True)
class PadState:
    """'state' [B, s] -> [B, dim]: zero-padded (or cut) to the model's state width."""

    dim: int

    def __call__(self, data):
        state = data[STATE]
        pad = self.dim - state.shape[-1]
        state = jnp.pad(state, [(0, 0)] * (state.ndim - 1) + [(0, pad)]) if pad > 0 else state[..., : self.dim]
        return {**data, STATE: state}


# ------------------------------------------------------------------------------------------ outputs


@dataclasses.dataclass(frozen=True, eq=False)
class Unnormalize:
    """'actions' normalized [B, H, A] -> float32 [B, H, D] in the data's units (D = the statistics' width:
    a π model's padded dims are cut)."""

    stats: NormStats
    mode: str

    def __call__(self, data):
        dims = np.shape(self.stats.mean)[-1]
        return {**data, "actions": unnormalize(jnp.asarray(data["actions"], jnp.float32)[..., :dims], self.stats,
                                               self.mode)}


@dataclasses.dataclass(frozen=True)
class AbsoluteActions:
    """openpi's AbsoluteActions: the robot's 'state' added to the delta-mask dims of 'actions'
    (`OpenpiTransforms.absolute_actions`)."""

    openpi: OpenpiTransforms

    def __call__(self, data):
        if data.get(STATE) is None:
            raise ValueError(f"openpi config {self.openpi.train_config!r} returns absolute actions: "
                             "env_actions needs the observation (its state)")
        return {**data, "actions": self.openpi.absolute_actions(data["actions"], data[STATE])}


@dataclasses.dataclass(frozen=True)
class RobotOutputs:
    """openpi's `<Robot>Outputs` (`OpenpiTransforms.robot_outputs`): the robot's action dims, not clipped."""

    openpi: OpenpiTransforms

    def __call__(self, data):
        return {**data, "actions": self.openpi.robot_outputs(data["actions"])}


@dataclasses.dataclass(frozen=True)
class KeepDims:
    """'actions' [B, H, A] -> [B, H, dims]: the first dims (the ones the env takes)."""

    dims: int

    def __call__(self, data):
        return {**data, "actions": data["actions"][..., : self.dims]}


@dataclasses.dataclass(frozen=True)
class Clip:
    """'actions' clipped to [low, high] (our envs' normalized action range)."""

    low: float = -1.0
    high: float = 1.0

    def __call__(self, data):
        return {**data, "actions": jnp.clip(data["actions"], self.low, self.high)}
