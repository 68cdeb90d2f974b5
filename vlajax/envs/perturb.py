"""Perturbation axes of the tabletop suite (LIBERO-Plus / LIBERO-PRO style robustness), as data.

Each axis has graded levels 0..`max_level`; level 0 is the training distribution and leaves the
env bit-identical to an unperturbed one. The levels are *data*: a float32 vector `[NUM_AXES]`
(`levels(camera=2, ...)`) passed to `TabletopEnv.reset_task(..., levels=...)` or drawn per
episode from ranges (`EnvConfig.randomize`, domain randomization), so one compiled reset/step
serves every level. `draw` turns levels into one episode's perturbation parameters (kept in
`state.info["episode"]["perturb"]`); the env applies them at reset (layout, robot, colours,
distractors, instruction), while rendering (camera pose, image noise), when observing (proprio
noise) and at every step (dynamics: the MJX model's fields scaled per env).

Every parameter is selected with `jnp.where(level > 0, perturbed, original)`, so level 0 is exact
(no `x + 0.0` sign-of-zero changes) and the random directions are drawn from a key folded off the
reset key (`PERTURB_STREAM`): the unperturbed draws of the episode are unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.envs.tabletop import scene


@dataclasses.dataclass(frozen=True)
class Axis:
    """One perturbation axis: its graded levels and what level k does."""

    name: str
    max_level: int
    discrete: bool  # levels are integers (sampled as integers when randomized)
    held_out: bool  # an evaluation-only axis: never sampled for training (domain randomization refuses it)
    effect: str  # what level k changes (k = the level)


AXES: tuple[Axis, ...] = (
    Axis("camera", 3, False, False,
         "each camera moved 3 cm x k in a random direction and turned 4 deg x k about a random axis"),
    Axis("lighting", 3, False, False,
         "image brightness x (1 +- 0.15 k), random sign; every object's and the table's rgb shifted "
         "by up to 0.08 k per channel"),
    Axis("distractors", 2, True, False,
         "k extra shapes (a bar, a column) of random palette colours placed on free table spots"),
    Axis("layout", 3, False, False,
         "the cubes moved together 2 cm x k, the square and the button 2 cm x k each, random directions"),
    Axis("robot", 3, False, False, "the gripper starts 2.5 cm x k from its home, random direction"),
    Axis("language", 2, True, True, "the instruction worded by the task's k-th held-out paraphrase"),
    Axis("dynamics", 3, False, False,
         "friction x (1 - 0.2 k), cube mass x (1 + 0.5 k), arm servo gain x (1 - 0.2 k)"),
    Axis("noise", 3, False, False,
         "Gaussian noise, std 6/255 x k on every image pixel and 4 mm x k on the proprio state, per step"),
)
NAMES: tuple[str, ...] = tuple(a.name for a in AXES)
NUM_AXES = len(AXES)
BY_NAME: dict[str, Axis] = {a.name: a for a in AXES}

PERTURB_STREAM = 0x5EED  # fold_in of the reset key that perturbation draws come from
# Magnitudes per level (SI units, radians).
CAMERA_SHIFT, CAMERA_TURN = 0.03, np.deg2rad(4.0)
BRIGHTNESS_STEP, COLOR_SHIFT = 0.15, 0.08
LAYOUT_SHIFT, ROBOT_SHIFT = 0.02, 0.025
FRICTION_STEP, MASS_STEP, GAIN_STEP = 0.2, 0.5, 0.2
IMAGE_NOISE, STATE_NOISE = 6.0 / 255.0, 0.004
TABLE_X, TABLE_Y = (-0.28, 0.28), (-0.24, 0.26)  # where shifted objects are kept (table top, m)
ROBOT_Z_MIN = 0.08  # a shifted gripper start stays above the cubes


# ---------------------------------------------------------------- level vectors and specs

def levels(**by_axis: float) -> np.ndarray:
    """float32 `[NUM_AXES]` with the named axes at the given levels, the rest at 0."""
    out = np.zeros((NUM_AXES,), np.float32)
    for name, lv in by_axis.items():
        axis = _axis(name)
        if not 0 <= lv <= axis.max_level:
            raise ValueError(f"{name} level must be in [0, {axis.max_level}], got {lv}")
        out[NAMES.index(name)] = lv
    return out


def _axis(name: str) -> Axis:
    if name not in BY_NAME:
        raise ValueError(f"unknown perturbation axis {name!r}; axes: {', '.join(NAMES)}")
    return BY_NAME[name]


def _level(axis: Axis, text: str) -> float:
    try:
        lv = float(text)
    except ValueError:
        raise ValueError(f"{axis.name}: level {text!r} is not a number") from None
    if not 0 <= lv <= axis.max_level or (axis.discrete and lv != int(lv)):
        kind = "an integer" if axis.discrete else "a number"
        raise ValueError(f"{axis.name}: level {text!r} must be {kind} in [0, {axis.max_level}]")
    return lv


def parse_ranges(spec: str) -> dict[str, tuple[float, float]]:
    """Domain randomization: `'camera=0:2,lighting=0:1,noise=1'` -> {axis: (lo, hi)}.

    Each episode draws its level uniformly from [lo, hi] (integers for discrete axes); `axis=v` is
    the fixed level v. Held-out axes (language) are refused. '' -> {}.
    """
    out: dict[str, tuple[float, float]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, sep, rng = item.partition("=")
        axis = _axis(name.strip())
        if axis.held_out:
            raise ValueError(f"{axis.name} is a held-out evaluation axis: training never samples it")
        if not sep:
            raise ValueError(f"{item!r}: write axis=lo:hi (e.g. {axis.name}=0:{axis.max_level})")
        lo, _, hi = rng.partition(":")
        lo_v = _level(axis, lo)
        hi_v = _level(axis, hi) if hi else lo_v
        if hi_v < lo_v:
            raise ValueError(f"{item!r}: the range's end is below its start")
        out[axis.name] = (lo_v, hi_v)
    return out


def parse_eval(spec: str) -> dict[str, tuple[int, ...]]:
    """Robustness evaluation: `'all'` (every axis at levels 1..max), `'camera,lighting'` (those
    axes, every level), `'camera=1:3,noise=2'` (levels 1..3 / level 2) -> {axis: levels}."""
    spec = spec.strip()
    if spec == "all":
        return {a.name: tuple(range(1, a.max_level + 1)) for a in AXES}
    out: dict[str, tuple[int, ...]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, sep, rng = item.partition("=")
        axis = _axis(name.strip())
        if not sep:
            out[axis.name] = tuple(range(1, axis.max_level + 1))
            continue
        lo, _, hi = rng.partition(":")
        lo_v = _level(axis, lo)
        hi_v = _level(axis, hi) if hi else lo_v
        if lo_v != int(lo_v) or hi_v != int(hi_v) or hi_v < lo_v or lo_v < 1:
            raise ValueError(f"{item!r}: evaluation levels are integers lo:hi with 1 <= lo <= hi "
                             "(level 0, the training distribution, is always evaluated)")
        out[axis.name] = tuple(range(int(lo_v), int(hi_v) + 1))
    if not out:
        raise ValueError("no perturbation axes given (use 'all' or e.g. 'camera,lighting')")
    return out


def range_arrays(ranges: Mapping[str, tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """{axis: (lo, hi)} -> lo, hi float32 `[NUM_AXES]` (axes not named: 0)."""
    lo, hi = np.zeros((NUM_AXES,), np.float32), np.zeros((NUM_AXES,), np.float32)
    for name, (a, b) in ranges.items():
        lo[NAMES.index(name)], hi[NAMES.index(name)] = a, b
    return lo, hi


def sample_levels(rng: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """Levels `[NUM_AXES]` uniform in [lo, hi] (discrete axes: integers lo..hi)."""
    u = jax.random.uniform(rng, (NUM_AXES,))
    discrete = jnp.asarray([a.discrete for a in AXES])
    cont = lo + u * (hi - lo)
    disc = jnp.minimum(jnp.floor(lo + u * (hi - lo + 1.0)), hi)
    return jnp.where(discrete, disc, cont).astype(jnp.float32)


# ---------------------------------------------------------------- one episode's parameters

def _unit(rng: jax.Array, shape) -> jax.Array:
    v = jax.random.normal(rng, (*shape, 3))
    return v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-6)


def _unit2(rng: jax.Array, shape=()) -> jax.Array:
    a = jax.random.uniform(rng, shape, minval=0.0, maxval=2 * np.pi)
    return jnp.stack([jnp.cos(a), jnp.sin(a)], -1)


def _rotation(axis: jax.Array, angle: jax.Array) -> jax.Array:
    """Rodrigues: unit axes `[..., 3]`, angles `[...]` -> rotation matrices `[..., 3, 3]`."""
    x, y, z = axis[..., 0], axis[..., 1], axis[..., 2]
    zero = jnp.zeros_like(x)
    k = jnp.stack([jnp.stack([zero, -z, y], -1), jnp.stack([z, zero, -x], -1), jnp.stack([-y, x, zero], -1)], -2)
    s, c = jnp.sin(angle)[..., None, None], jnp.cos(angle)[..., None, None]
    return jnp.eye(3) + s * k + (1.0 - c) * (k @ k)


def draw(rng: jax.Array, lv: jax.Array, num_cameras: int, ngeom: int) -> dict[str, jax.Array]:
    """One episode's perturbation parameters for levels `lv` `[NUM_AXES]` (may be traced).

    -> {"levels" [A], "cam_shift" [C, 3], "cam_rot" [C, 3, 3], "brightness" [], "rgb_shift"
    [ngeom, 3], "distractors" [] int32, "distractor_color" [D] int32, "distractor_key" [2],
    "cube_shift" [2], "zone_shift" [2], "button_shift" [2], "robot_shift" [3], "paraphrase" []
    int32, "friction" / "mass" / "gain" [] factors, "image_noise" / "state_noise" [] stds,
    "noise_key" [2]}. Everything is the identity at level 0.
    """
    k = dict(zip(("cam_dir", "cam_axis", "sign", "rgb", "dist", "dcol", "cube", "zone", "button", "robot",
                  "noise"), jax.random.split(rng, 11)))
    at = {a.name: lv[i] for i, a in enumerate(AXES)}
    cam, light = at["camera"], at["lighting"]
    sign = jnp.where(jax.random.bernoulli(k["sign"]), 1.0, -1.0)
    turn = _rotation(_unit(k["cam_axis"], (num_cameras,)), jnp.full((num_cameras,), cam * CAMERA_TURN))
    return {
        "levels": lv,
        "cam_shift": CAMERA_SHIFT * cam * _unit(k["cam_dir"], (num_cameras,)),
        "cam_rot": turn,
        "brightness": 1.0 + sign * BRIGHTNESS_STEP * light,
        "rgb_shift": COLOR_SHIFT * light * jax.random.uniform(k["rgb"], (ngeom, 3), minval=-1.0, maxval=1.0),
        "distractors": jnp.floor(at["distractors"]).astype(jnp.int32),
        "distractor_color": jax.random.randint(k["dcol"], (scene.NUM_DISTRACTORS,), 0, len(scene.PALETTE)),
        "distractor_key": k["dist"],
        "cube_shift": LAYOUT_SHIFT * at["layout"] * _unit2(k["cube"]),
        "zone_shift": LAYOUT_SHIFT * at["layout"] * _unit2(k["zone"]),
        "button_shift": LAYOUT_SHIFT * at["layout"] * _unit2(k["button"]),
        "robot_shift": ROBOT_SHIFT * at["robot"] * _unit(k["robot"], ()),
        "paraphrase": jnp.floor(at["language"]).astype(jnp.int32),
        "friction": 1.0 - FRICTION_STEP * at["dynamics"],
        "mass": 1.0 + MASS_STEP * at["dynamics"],
        "gain": 1.0 - GAIN_STEP * at["dynamics"],
        "image_noise": IMAGE_NOISE * at["noise"],
        "state_noise": STATE_NOISE * at["noise"],
        "noise_key": k["noise"],
    }


def _on(p, name: str) -> jax.Array:
    return p["levels"][NAMES.index(name)] > 0


# ---------------------------------------------------------------- applied at reset

def shift_layout(p, xy: jax.Array, zone: jax.Array, button: jax.Array):
    """Cube xy `[3, 2]`, zone xy `[2]`, button xy `[2]` moved by the layout axis (kept on the table)."""
    on = _on(p, "layout")
    lo, hi = jnp.asarray([TABLE_X[0], TABLE_Y[0]]), jnp.asarray([TABLE_X[1], TABLE_Y[1]])
    # the cubes move together (no new overlaps); clipped as a group so their spacing is kept
    shift = p["cube_shift"]
    shift = jnp.clip(shift, lo + scene.CUBE_HALF - xy.min(0), hi - scene.CUBE_HALF - xy.max(0))
    move = lambda x, d, half: jnp.clip(x + d, lo + half, hi - half)
    return (jnp.where(on, xy + shift, xy), jnp.where(on, move(zone, p["zone_shift"], scene.ZONE_HALF), zone),
            jnp.where(on, move(button, p["button_shift"], 0.035), button))


def robot_home(p) -> jax.Array:
    """Gripper start `[3]` (fingertip centre) moved by the robot axis."""
    home = jnp.asarray(scene.HOME, jnp.float32)
    moved = home + p["robot_shift"]
    moved = moved.at[2].set(jnp.maximum(moved[2], ROBOT_Z_MIN))
    return jnp.where(_on(p, "robot"), moved, home)


def place_distractors(p, cubes_xy: jax.Array, zone: jax.Array, button: jax.Array) -> jax.Array:
    """Distractor mocap positions `[D, 3]`: the first `p["distractors"]` on the free table spots
    farthest from the cubes, the square and the button (of 16 random candidates), the rest parked."""
    d = scene.NUM_DISTRACTORS
    cand = jax.random.uniform(p["distractor_key"], (16, 2), minval=jnp.asarray([-0.24, -0.14]),
                              maxval=jnp.asarray([0.24, 0.22]))
    objects = jnp.concatenate([cubes_xy, zone[None], button[None], jnp.asarray(scene.HOME[:2])[None]])
    clearance = jnp.linalg.norm(cand[:, None] - objects[None], axis=-1).min(-1)  # [16]
    best = jnp.argsort(-clearance)
    chosen = [cand[best[0]]]
    for _ in range(1, d):  # next: farthest from the objects and the distractors already placed
        placed = jnp.stack(chosen)
        gap = jnp.minimum(clearance, jnp.linalg.norm(cand[:, None] - placed[None], axis=-1).min(-1))
        chosen.append(cand[jnp.argmax(gap)])
    heights = jnp.asarray([0.014, 0.035])[:d]  # the MJCF half heights: resting on the table
    pos = jnp.concatenate([jnp.stack(chosen), heights[:, None]], -1)
    use = jnp.arange(d) < p["distractors"]
    return jnp.where(use[:, None], pos, jnp.asarray(scene.PARKED, jnp.float32))


def recolor(p, rgba: jax.Array, distractor_geom: tuple[int, ...]) -> jax.Array:
    """Episode geom rgba `[ngeom, 4]` with the lighting axis's colour shifts and the distractors' colours."""
    palette = jnp.asarray([c for _, c in scene.PALETTE], jnp.float32)
    rgba = jnp.where(_on(p, "distractors"), rgba.at[jnp.asarray(distractor_geom), :3].set(
        palette[p["distractor_color"]]), rgba)
    shifted = rgba.at[:, :3].set(jnp.clip(rgba[:, :3] + p["rgb_shift"], 0.0, 1.0))
    return jnp.where(_on(p, "lighting"), shifted, rgba)


def brightness(p, base: jax.Array) -> jax.Array:
    return jnp.where(_on(p, "lighting"), base * p["brightness"], base)


# ---------------------------------------------------------------- applied when observing / stepping

def move_cameras(p, data, cam_ids: tuple[int, ...]):
    """`data` with the cameras `cam_ids` (in `draw`'s camera order) shifted and turned in the world frame."""
    ids = jnp.asarray(cam_ids)
    pos = data.cam_xpos[ids]
    mat = data.cam_xmat[ids].reshape(-1, 3, 3)
    on = _on(p, "camera")
    pos = jnp.where(on, pos + p["cam_shift"], pos)
    mat = jnp.where(on, p["cam_rot"] @ mat, mat)
    return data.replace(cam_xpos=data.cam_xpos.at[ids].set(pos),
                        cam_xmat=data.cam_xmat.at[ids].set(mat.reshape(data.cam_xmat[ids].shape)))


def _step_key(p, data, salt: int) -> jax.Array:
    tick = jnp.round(data.time * 1000.0).astype(jnp.int32)  # one key per observation time (ms)
    return jax.random.fold_in(jax.random.fold_in(p["noise_key"], salt), tick)


def noisy_image(p, data, img: jax.Array, clean: jax.Array, salt: int, to_uint8) -> jax.Array:
    """uint8 image: `clean` at noise level 0, else `to_uint8(img + noise)` (img float, brightness applied)."""
    noise = p["image_noise"] * jax.random.normal(_step_key(p, data, salt), img.shape)
    return jnp.where(_on(p, "noise"), to_uint8(img + noise), clean)


def noisy_state(p, data, state: jax.Array) -> jax.Array:
    noise = p["state_noise"] * jax.random.normal(_step_key(p, data, 1000), state.shape)
    return jnp.where(_on(p, "noise"), state + noise, state)


def dynamics_model(p, model, idx: scene.Index):
    """The MJX model with friction (every geom), cube masses and inertias and the arm servos'
    gains scaled by the dynamics axis (factors are exactly 1 at level 0)."""
    cube_bodies = jnp.asarray(idx.cube_body)
    arm = jnp.asarray(idx.arm_actuators)
    mass = model.body_mass.at[cube_bodies].multiply(p["mass"])
    inertia = model.body_inertia.at[cube_bodies].multiply(p["mass"])
    gain = model.actuator_gainprm.at[arm, 0].multiply(p["gain"])
    bias = model.actuator_biasprm.at[arm, 1:3].multiply(p["gain"])
    return model.replace(geom_friction=model.geom_friction.at[:, 0].multiply(p["friction"]), body_mass=mass,
                         body_inertia=inertia, actuator_gainprm=gain, actuator_biasprm=bias)
