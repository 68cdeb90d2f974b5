"""openpi's train configs as data: model fields and the data transforms an imported policy runs.

openpi builds a policy from a train config (`openpi.training.config`): its model fields (π0 or
π0.5, action horizon, max prompt tokens, whether the π0.5 prompt carries the state), the asset id
of the norm stats inside the checkpoint (`<ckpt>/assets/<asset id>/norm_stats.json`), the norm
type (z-score for π0, quantiles for π0.5) and the robot's data transforms. `OPENPI_CONFIGS` holds
the configs we import by name; `OpenpiTransforms` is the record stored in an imported run's
`policy.json` so eval, the server and the RL rollout rebuild the same policy
(`vlajax.policies.bridge.Bridge`, field `openpi`).

The robot keys (`ROBOTS`, `RobotKeys`) live in the one key table, `vlajax.shared.robots`; the
robot's input / output maps are `OpenpiTransforms.env_view` and `robot_actions` (LIBERO: the first
7 action dims; DROID: the state joined from two keys; ALOHA with `adapt_to_pi`: the joints flipped
and the grippers mapped to openpi's angular space on the way in, and back on the way out). The
policy runs them as two steps of its transform list (`vlajax.policies.bridge`, `Bridge.transforms`
prints it). Everything here is jnp on static shapes (jittable); raw keys are renamed at trace time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from vlajax.shared.robots import ROBOTS, RobotKeys, image_key

__all__ = ["OPENPI_CONFIGS", "ROBOTS", "OpenpiConfig", "OpenpiTransforms", "RobotKeys", "delta_shift",
           "make_bool_mask"]


def make_bool_mask(*dims: int) -> tuple[bool, ...]:
    """openpi's `make_bool_mask`: (6, -1) -> six True then one False."""
    return tuple(b for d in dims for b in ([d > 0] * abs(d)))


@dataclasses.dataclass(frozen=True)
class OpenpiTransforms:
    """The data transforms of an imported openpi policy (stored in `policy.json` as `openpi`)."""

    train_config: str  # openpi train config the checkpoint was trained with ('' = named by flags)
    robot: str  # 'libero' | 'droid' | 'aloha' (ROBOTS)
    asset_id: str  # <ckpt>/assets/<asset_id>/norm_stats.json
    delta_mask: tuple[bool, ...] = ()  # AbsoluteActions on these action dims (openpi's DeltaActions in training)
    default_prompt: str = ""  # InjectDefaultPrompt ('' = none)
    adapt_to_pi: bool = False  # aloha: joint flips and gripper mapping to openpi's space

    def __post_init__(self):
        if self.robot not in ROBOTS:
            raise ValueError(f"openpi robot transforms {self.robot!r}: choose from {sorted(ROBOTS)}")
        object.__setattr__(self, "delta_mask", tuple(bool(b) for b in self.delta_mask))

    @property
    def keys(self) -> RobotKeys:
        return ROBOTS[self.robot]

    @property
    def cameras(self) -> tuple[str, ...]:
        return tuple(sorted(c for _, c in self.keys.images))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"delta_mask": list(self.delta_mask)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OpenpiTransforms:
        return cls(**{**d, "delta_mask": tuple(d.get("delta_mask", ()))})

    # ------------------------------------------------------------------ inputs

    def env_view(self, obs: dict) -> dict:
        """Raw robot observation (batched, openpi's keys) -> our env keys `pixels/<camera>` uint8
        [B, h, w, 3] and `state` [B, S] (the robot's state after its input transform). Keys
        already in our form pass; other keys are kept."""
        out = {k: v for k, v in obs.items() if k not in dict(self.keys.images) and k not in self.keys.state}
        for key, cam in self.keys.images:
            img = obs.get(key, obs.get(image_key(cam)))
            if img is None:
                continue
            if img.shape[-1] != 3 and img.shape[-3] == 3:  # [B, 3, h, w] -> [B, h, w, 3]
                img = jnp.moveaxis(jnp.asarray(img), -3, -1)
            out[image_key(cam)] = img
        for alias, cam in self.keys.aliases:  # the same array under the dataset's camera name
            if image_key(cam) in out and image_key(alias) not in out:
                out[image_key(alias)] = out[image_key(cam)]
        if all(k in obs for k in self.keys.state):
            parts = [jnp.asarray(obs[k], jnp.float32) for k in self.keys.state]
            rank = parts[0].ndim  # a scalar per row (DROID's gripper position [B]) becomes [B, 1]
            state = jnp.concatenate([p if p.ndim == rank else p[..., None] for p in parts], axis=-1)
        elif "state" in obs:
            state = jnp.asarray(obs["state"], jnp.float32)
        else:
            raise KeyError(f"the {self.robot} policy reads {list(self.keys.state)}; the observation has {sorted(obs)}")
        out["state"] = self._decode_state(state) if self.adapt_to_pi else state
        return out

    def _decode_state(self, state):
        state = state * _ALOHA_FLIP
        g = _gripper_to_angular(state[..., [6, 13]])
        return state.at[..., [6, 13]].set(g)

    # ------------------------------------------------------------------ outputs

    def robot_actions(self, actions, state):
        """Unnormalized actions [B, H, A] and the robot's state [B, S] -> robot actions [B, H, action_dims]:
        `absolute_actions`, then `robot_outputs`."""
        return self.robot_outputs(self.absolute_actions(actions, state))

    def absolute_actions(self, actions, state):
        """openpi's AbsoluteActions: the robot's state [B, S] added to the `delta_mask` dims of actions [B, H, A]
        (unchanged without a delta mask)."""
        if not self.delta_mask:
            return actions
        n = len(self.delta_mask)
        return jnp.concatenate([actions[..., :n] + delta_shift(self.delta_mask, state, jnp), actions[..., n:]], axis=-1)

    def robot_outputs(self, actions):
        """openpi's `<Robot>Outputs`: actions [B, H, A] -> the robot's [B, H, action_dims] (ALOHA: back from
        openpi's space)."""
        actions = actions[..., : self.keys.action_dims]
        if self.adapt_to_pi:
            actions = actions * _ALOHA_FLIP
            actions = actions.at[..., [6, 13]].set(_gripper_from_angular(actions[..., [6, 13]]))
        return actions


def delta_shift(mask: tuple[bool, ...], state, xp=np):
    """What openpi's DeltaActions subtracts from (AbsoluteActions adds to) a chunk's first n = len(mask)
    action dims: where(mask, state[..., :n], 0)[..., None, :], float32 [..., 1, n]. `xp`: numpy (the SFT
    data transform) or jax.numpy (the policy's outputs, jitted)."""
    n = len(mask)
    return xp.where(xp.asarray(mask, bool), xp.asarray(state, xp.float32)[..., :n], 0.0)[..., None, :]


# aloha <-> openpi's internal runtime (openpi's aloha_policy: the joint flips and gripper maps)
_ALOHA_FLIP = np.array([1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1], np.float32)


def _gripper_to_angular(value):
    value = value * (0.05800 - 0.01844) + 0.01844  # Aloha's linear gripper range
    arm, horn = 0.036, 0.022  # Interbotix constants
    value = jnp.arcsin(jnp.clip((horn**2 + value**2 - arm**2) / (2 * horn * value), -1.0, 1.0))
    return (value - 0.5476) / (1.6296 - 0.5476)


def _gripper_from_angular(value):
    return (value + 0.5476 - (-0.6213)) / (1.4910 - (-0.6213))


@dataclasses.dataclass(frozen=True)
class OpenpiConfig:
    """One openpi train config: the model fields it sets and its transforms."""

    pi05: bool
    action_horizon: int
    max_token_len: int
    discrete_state_input: bool
    transforms: OpenpiTransforms
    action_dim: int = 32

    @property
    def norm(self) -> str:
        """openpi: z-score for π0, quantiles for every other model type."""
        return "quantile" if self.pi05 else "mean_std"


def _cfg(name: str, pi05: bool, horizon: int, robot: str, asset: str, *, dsi: bool | None = None,
         delta: tuple[bool, ...] = (), prompt: str = "", adapt: bool = False) -> OpenpiConfig:
    return OpenpiConfig(pi05, horizon, 200 if pi05 else 48, pi05 if dsi is None else dsi,
                        OpenpiTransforms(name, robot, asset, delta, prompt, adapt))


# openpi commit 15a9616, src/openpi/training/config.py (Pi0Config defaults: horizon 50, 48 tokens for
# π0 / 200 for π0.5, discrete_state_input = pi05, action_dim 32; asset id = AssetsConfig.asset_id or repo_id)
OPENPI_CONFIGS: dict[str, OpenpiConfig] = {c.transforms.train_config: c for c in (
    _cfg("pi0_libero", False, 50, "libero", "physical-intelligence/libero", delta=make_bool_mask(6, -1)),
    _cfg("pi05_libero", True, 10, "libero", "physical-intelligence/libero", dsi=False),
    _cfg("pi0_droid", False, 10, "droid", "droid"),
    _cfg("pi05_droid", True, 15, "droid", "droid"),
    _cfg("pi0_aloha_sim", False, 50, "aloha", "lerobot/aloha_sim_transfer_cube_human", prompt="Transfer cube",
         adapt=True),
    _cfg("pi0_aloha", False, 50, "aloha", "trossen", delta=make_bool_mask(6, -1, 6, -1), adapt=True),
    _cfg("pi05_aloha", True, 50, "aloha", "trossen", delta=make_bool_mask(6, -1, 6, -1), adapt=True),
)}
