"""The one table of observation key names: our env's keys and each robot's raw keys.

Every module that reads or writes an observation by key takes its names from here (the policy's
transforms, the policy server's wire spec, the LIBERO worker protocol, the openpi configs).

Our env's keys (a `vlajax.envs` observation, batched [B, ...]):

    pixels/<camera>   uint8 [B, h, w, 3]     one per camera (`image_key(camera)`)
    state             float [B, S]           proprioception
    instruction_id    int [B]                which of the task's instructions
    prompt            str / B strings        free text (tokenized on the host)
    tokens, token_mask  int32 / bool [B, L]  an already tokenized prompt
    noise             float [B, H, A]        the flow's starting noise (openpi's `infer(noise=...)`)

A robot's raw keys (`ROBOTS`, openpi's `<Robot>Inputs` / `<Robot>Outputs` of the same name):

  libero  `observation/image`, `observation/wrist_image` (uint8 [h, w, 3]) -> cameras `agentview`,
          `wrist`; `observation/state` [8]; actions: the first 7 dims. A dataset of openpi's LIBERO
          layout names the cameras `image` / `wrist_image` (`aliases`).
  droid   `observation/exterior_image_1_left`, `observation/wrist_image_left` -> agentview, wrist;
          state = `observation/joint_position` [7] + `observation/gripper_position` [1]; 8 action dims.
  aloha   `images/cam_high`, `images/cam_left_wrist`, `images/cam_right_wrist` (uint8 [3, h, w] or
          [h, w, 3]; the wrist cameras may be absent) -> agentview, wrist, wrist_right; `state` [14];
          14 action dims.
"""

from __future__ import annotations

import dataclasses

__all__ = ["INSTRUCTION_ID", "NOISE", "PIXELS", "PROMPT", "ROBOTS", "STATE", "TOKENS", "TOKEN_MASK", "RobotKeys",
           "camera_keys", "image_key", "state_key"]

PIXELS = "pixels/"  # prefix of our env's camera keys
STATE = "state"
INSTRUCTION_ID = "instruction_id"
PROMPT = "prompt"
TOKENS = "tokens"
TOKEN_MASK = "token_mask"
NOISE = "noise"
TABLETOP_ACTION_DIMS = 4  # our tabletop env's actions (vlajax.envs.tabletop: end-effector dx, dy, dz, gripper)


def image_key(camera: str) -> str:
    """Our env's key of `camera`'s image: 'pixels/<camera>'."""
    return PIXELS + camera


@dataclasses.dataclass(frozen=True)
class RobotKeys:
    """Raw observation keys of one robot and where they go."""

    images: tuple[tuple[str, str], ...]  # (raw key, our camera name), base camera first
    state: tuple[str, ...]  # raw keys concatenated into the state
    action_dims: int  # dims the robot's outputs keep
    camera_map: tuple[tuple[str, str], ...]  # (camera, openpi image slot)
    optional: tuple[str, ...] = ()  # cameras that may be absent (black, mask False)
    # (dataset camera, our camera): the names a dataset of openpi's layout gives them (LIBERO: `image`,
    # `wrist_image`); the robot's input transform also emits them, so a policy fine-tuned on such a
    # dataset reads raw requests
    aliases: tuple[tuple[str, str], ...] = ()


ROBOTS: dict[str, RobotKeys] = {
    "libero": RobotKeys((("observation/image", "agentview"), ("observation/wrist_image", "wrist")),
                        ("observation/state",), 7, (("agentview", "base_0_rgb"), ("wrist", "left_wrist_0_rgb")),
                        aliases=(("image", "agentview"), ("wrist_image", "wrist"))),
    "droid": RobotKeys((("observation/exterior_image_1_left", "agentview"), ("observation/wrist_image_left", "wrist")),
                       ("observation/joint_position", "observation/gripper_position"), 8,
                       (("agentview", "base_0_rgb"), ("wrist", "left_wrist_0_rgb"))),
    "aloha": RobotKeys((("images/cam_high", "agentview"), ("images/cam_left_wrist", "wrist"),
                        ("images/cam_right_wrist", "wrist_right")), ("state",), 14,
                       (("agentview", "base_0_rgb"), ("wrist", "left_wrist_0_rgb"),
                        ("wrist_right", "right_wrist_0_rgb")),
                       optional=("wrist", "wrist_right")),
}


def camera_keys(robot: str) -> dict[str, str]:
    """{our camera: the robot's raw image key}, e.g. libero: {'agentview': 'observation/image', ...}."""
    return {cam: key for key, cam in ROBOTS[robot].images}


def state_key(robot: str) -> str:
    """The robot's state key; keys concatenated into the state are joined with '+'."""
    return "+".join(ROBOTS[robot].state)
