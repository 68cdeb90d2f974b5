"""The tabletop scene shared by every task: model loading, named indices, colour palette and layouts.

World frame: the table top is z = 0, x points to the right of the agent-view camera and y away from
it. The gripper is a Cartesian (x, y, z slide joints) two-finger gripper whose fingers slide along x.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

ASSET = pathlib.Path(__file__).parent / "assets" / "tabletop.xml"
NUM_CUBES = 3
CUBE_HALF = 0.02  # cube half size (m)
ZONE_HALF = 0.05  # target square half size (m)
FINGER_OPEN = 0.045  # finger joint value when fully open (m); the gap is twice this
BUTTON_TRAVEL = 0.015  # button cap travel (m); pressed once below -PRESSED_DEPTH
PRESSED_DEPTH = 0.009
BUTTON_TOP = 0.028  # z of the button cap's top at rest (m)
HOME = (0.0, -0.16, 0.14)  # gripper joint targets at reset (fingertip centre, m)
NUM_DISTRACTORS = 2  # visual-only mocap shapes (`distractor<i>` in the MJCF)
PARKED = (0.0, -10.0, -10.0)  # where unused distractors sit: behind and below both cameras

# Named colours for the instruction templates: (name, rgb).
PALETTE: tuple[tuple[str, tuple[float, float, float]], ...] = (
    ("red", (0.85, 0.12, 0.1)),
    ("green", (0.15, 0.7, 0.2)),
    ("blue", (0.15, 0.3, 0.9)),
    ("yellow", (0.95, 0.85, 0.15)),
    ("purple", (0.6, 0.2, 0.75)),
    ("white", (0.92, 0.92, 0.92)),
)
COLOR_NAMES = tuple(name for name, _ in PALETTE)

# Cube slots (x, y) for random layouts and the row x-slots for spatial layouts.
GRID_SLOTS = np.array([(x, y) for y in (-0.1, -0.02) for x in (-0.15, 0.0, 0.15)], np.float32)
ROW_X = np.array([-0.15, 0.0, 0.15], np.float32)
GOAL_LAYOUT = np.array([(-0.12, -0.08), (0.0, -0.02), (0.13, -0.08)], np.float32)
ZONE_FIXED, BUTTON_FIXED = (0.12, 0.14), (-0.13, 0.15)


@functools.cache
def load_model() -> mujoco.MjModel:
    """The packaged MJCF (cached: one MjModel per process, never mutated)."""
    return mujoco.MjModel.from_xml_path(str(ASSET))


@dataclasses.dataclass(frozen=True)
class Index:
    """qpos/qvel/geom addresses of the named parts of the scene."""

    gripper_qpos: tuple[int, int, int]
    gripper_qvel: tuple[int, int, int]
    finger_qpos: tuple[int, int]
    button_qpos: int
    cube_qpos: tuple[int, ...]  # start of each cube's free joint (pos 3 + quat 4)
    cube_geom: tuple[int, ...]
    cube_body: tuple[int, ...]
    zone_geom: int
    button_geom: int
    zone_mocap: int
    button_mocap: int
    distractor_mocap: tuple[int, ...]
    distractor_geom: tuple[int, ...]
    table_geom: int
    arm_actuators: tuple[int, int, int]  # the x/y/z position servos

    @classmethod
    def of(cls, m: mujoco.MjModel) -> Index:
        q = lambda j: int(m.jnt_qposadr[m.joint(j).id])
        v = lambda j: int(m.jnt_dofadr[m.joint(j).id])
        return cls(
            gripper_qpos=(q("gx"), q("gy"), q("gz")),
            gripper_qvel=(v("gx"), v("gy"), v("gz")),
            finger_qpos=(q("finger_l"), q("finger_r")),
            button_qpos=q("button"),
            cube_qpos=tuple(q(f"cube{i}") for i in range(NUM_CUBES)),
            cube_geom=tuple(m.geom(f"cube{i}").id for i in range(NUM_CUBES)),
            cube_body=tuple(m.body(f"cube{i}").id for i in range(NUM_CUBES)),
            zone_geom=m.geom("zone").id,
            button_geom=m.geom("button").id,
            zone_mocap=int(m.body("zone").mocapid[0]),
            button_mocap=int(m.body("button_base").mocapid[0]),
            distractor_mocap=tuple(int(m.body(f"distractor{i}").mocapid[0]) for i in range(NUM_DISTRACTORS)),
            distractor_geom=tuple(m.geom(f"distractor{i}").id for i in range(NUM_DISTRACTORS)),
            table_geom=m.geom("table").id,
            arm_actuators=(m.actuator("ax").id, m.actuator("ay").id, m.actuator("az").id),
        )


def sample_colors(rng: jax.Array, fixed_target: jax.Array, same_cube_color: jax.Array) -> jax.Array:
    """Palette indices `[4]` int32 for (cube0, cube1, cube2, zone); all distinct unless `same_cube_color`.

    `fixed_target` >= 0 pins cube0's colour (the Object suite names its target by colour); -1 = random.
    """
    perm = jax.random.permutation(rng, len(PALETTE)).astype(jnp.int32)
    pinned = jnp.where(perm == fixed_target, perm[0], perm).at[0].set(fixed_target)  # swap it to the front
    perm = jnp.where(fixed_target >= 0, pinned, perm)
    same = jnp.stack([perm[0], perm[0], perm[0], perm[1]])
    return jnp.where(same_cube_color, same, perm[:4])


def sample_layout(rng: jax.Array, layout: jax.Array, row_slots: jax.Array):
    """Cube xy `[3, 2]`, cube yaw `[3]`, zone xy `[2]`, button xy `[2]` for one episode.

    `layout` indexes ("random", "row", "fixed"); `row_slots` `[3]` puts cube i at row slot
    `row_slots[i]` (0 = left) for the row layout. All layouts are sampled, one is selected.
    """
    k_slot, k_jit, k_yaw, k_zone, k_button, k_row = jax.random.split(rng, 6)
    jitter = jax.random.uniform(k_jit, (NUM_CUBES, 2), minval=-1.0, maxval=1.0)
    slots = jax.random.permutation(k_slot, len(GRID_SLOTS))[:NUM_CUBES]
    random_xy = jnp.asarray(GRID_SLOTS)[slots] + 0.015 * jitter
    y = jax.random.uniform(k_row, (), minval=-0.09, maxval=-0.03)
    row_xy = jnp.stack([jnp.asarray(ROW_X)[row_slots], jnp.full((NUM_CUBES,), y)], -1) + 0.015 * jitter
    fixed_xy = jnp.asarray(GOAL_LAYOUT) + 0.01 * jitter
    xy = jnp.stack([random_xy, row_xy, fixed_xy])[layout]
    yaw = jax.random.uniform(k_yaw, (NUM_CUBES,), minval=-0.2, maxval=0.2)
    u_zone, u_button = jax.random.uniform(k_zone, (2,)), jax.random.uniform(k_button, (2,))
    is_fixed = layout == 2
    zone = jnp.where(is_fixed, jnp.asarray(ZONE_FIXED) + 0.02 * (u_zone - 0.5),
                     jnp.array([0.06, 0.12]) + u_zone * jnp.array([0.1, 0.05]))
    button = jnp.where(is_fixed, jnp.asarray(BUTTON_FIXED) + 0.02 * (u_button - 0.5),
                       jnp.array([-0.17, 0.13]) + u_button * jnp.array([0.08, 0.04]))
    return xy, yaw, zone, button


def yaw_quat(yaw: jax.Array) -> jax.Array:
    """Quaternion(s) `[..., 4]` (w, x, y, z) for a rotation by `yaw` about z."""
    return jnp.stack([jnp.cos(yaw / 2), jnp.zeros_like(yaw), jnp.zeros_like(yaw), jnp.sin(yaw / 2)], -1)
