"""Batched RGB cameras from MJX state: a pure-JAX box ray caster (CPU default) and MJX's Warp renderer.

Both backends cast one ray through each pixel centre (MuJoCo-Warp's `compute_ray` convention: row 0
is the top of the image), take the first box hit, and shade it with the same unlit-material model
MuJoCo-Warp uses with specular, emission, textures and shadows off:

    rgb = base * (headlight.ambient + sum_l light.ambient)
        + base * sum_l light.diffuse * max(0, n . -light.dir)
        + base * headlight.diffuse * max(0, n . camera_back_axis)

Missed rays get the background colour. So on the same state they differ only by float rounding,
Warp's fast-math and its 8-bit packing (<= 1/255 per channel) and, on silhouette edges, by ties
between two surfaces hit at the same depth (a few pixels per frame).

Only box geoms in groups 0-2 are drawn (every rendered geom of the tabletop scene is a box);
`Renderer.__init__` fails on any other rendered geom type.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

RENDER_GROUPS = (0, 1, 2)
BACKGROUND = (0.0, 0.0, 0.0)


@dataclasses.dataclass(frozen=True)
class RenderSpec:
    """Static rendering constants extracted from an `mujoco.MjModel` (numpy, host side)."""

    cameras: tuple[str, ...]  # camera names, in output order
    cam_ids: tuple[int, ...]  # MuJoCo camera ids
    width: int
    height: int
    geom_ids: np.ndarray  # [G] int, rendered box geoms, world-aligned ones first
    num_aligned: int  # how many of them never rotate (no rotational joint above, identity orientation)
    geom_size: np.ndarray  # [G, 3] box half sizes
    rays: np.ndarray  # [C, H*W, 3] unit ray directions in each camera frame
    ambient: np.ndarray  # [3] headlight ambient + sum of light ambients
    light_dirs: np.ndarray  # [L, 3] unit directions *towards* each directional light
    light_diffuse: np.ndarray  # [L, 3]
    head_diffuse: np.ndarray  # [3] headlight diffuse (0 if the headlight is off)


def camera_rays(width: int, height: int, fovy_deg: float) -> np.ndarray:
    """Unit ray directions `[H*W, 3]` in the camera frame (-z forward), row-major from the top-left."""
    half_h = np.tan(0.5 * np.deg2rad(fovy_deg))
    half_w = half_h * width / height
    px, py = np.meshgrid(np.arange(width), np.arange(height))
    x = -half_w + 2 * half_w * (px + 0.5) / width
    y = half_h - 2 * half_h * (py + 0.5) / height
    d = np.stack([x, y, -np.ones_like(x)], -1).reshape(-1, 3)
    return (d / np.linalg.norm(d, axis=-1, keepdims=True)).astype(np.float32)


def _never_rotates(m: mujoco.MjModel, geom: int) -> bool:
    """True if the geom's world orientation is the identity for every qpos (and mocap pose we set)."""
    if not np.allclose(m.geom_quat[geom], (1, 0, 0, 0)):
        return False
    body = m.geom_bodyid[geom]
    while body > 0:
        joints = range(m.body_jntadr[body], m.body_jntadr[body] + m.body_jntnum[body])
        if any(m.jnt_type[j] != mujoco.mjtJoint.mjJNT_SLIDE for j in joints):
            return False
        if not np.allclose(m.body_quat[body], (1, 0, 0, 0)):
            return False
        body = m.body_parentid[body]
    return True


def make_spec(mj_model: mujoco.MjModel, cameras: tuple[str, ...], width: int, height: int) -> RenderSpec:
    """Collect the rendered boxes, cameras and lights of `mj_model`."""
    groups = mj_model.geom_group
    ids = [g for g in range(mj_model.ngeom) if groups[g] in RENDER_GROUPS and mj_model.geom_rgba[g, 3] > 0]
    for g in ids:
        if mj_model.geom_type[g] != mujoco.mjtGeom.mjGEOM_BOX:
            name = mujoco.mj_id2name(mj_model, mujoco.mjtObj.mjOBJ_GEOM, g)
            raise ValueError(f"the JAX ray caster draws only boxes; geom {name!r} is not one")
    aligned = [g for g in ids if _never_rotates(mj_model, g)]
    ids = aligned + [g for g in ids if g not in aligned]
    cam_ids = tuple(mj_model.camera(c).id for c in cameras)
    rays = np.stack([camera_rays(width, height, float(mj_model.cam_fovy[c])) for c in cam_ids])
    kind = mujoco.mjtLightType.mjLIGHT_DIRECTIONAL
    directional = [i for i in range(mj_model.nlight) if mj_model.light_type[i] == kind]
    if len(directional) != mj_model.nlight:
        raise ValueError("the JAX ray caster supports only directional lights")
    head = mj_model.vis.headlight
    ambient = np.asarray(mj_model.light_ambient[directional].sum(0), np.float32)
    if head.active:
        ambient = ambient + np.asarray(head.ambient, np.float32)
    dirs = -np.asarray(mj_model.light_dir[directional], np.float32).reshape(-1, 3)
    dirs /= np.maximum(np.linalg.norm(dirs, axis=-1, keepdims=True), 1e-9)
    return RenderSpec(
        cameras=tuple(cameras),
        cam_ids=cam_ids,
        width=width,
        height=height,
        geom_ids=np.asarray(ids, np.int32),
        num_aligned=len(aligned),
        geom_size=np.asarray(mj_model.geom_size[ids], np.float32),
        rays=rays,
        ambient=ambient,
        light_dirs=dirs,
        light_diffuse=np.asarray(mj_model.light_diffuse[directional], np.float32).reshape(-1, 3),
        head_diffuse=np.asarray(head.diffuse if head.active else (0, 0, 0), np.float32),
    )


def _slab(o_local, inv, size):
    """Ray-box slab test with pixels on the minor axis (vectorizes well on CPU).

    o_local `[3, G, 1]` ray origin in each box frame, inv `[3, G or 1, P]` inverse ray directions,
    size `[3, G, 1]` half sizes -> (distance `[G, P]`, inf on a miss; entry-face axis `[G, P]`).
    """
    t1 = (-size - o_local) * inv
    t2 = (size - o_local) * inv
    lo, hi = jnp.minimum(t1, t2), jnp.maximum(t1, t2)
    t_near = jnp.maximum(jnp.maximum(lo[0], lo[1]), lo[2])
    t_far = jnp.minimum(jnp.minimum(hi[0], hi[1]), hi[2])
    axis = jnp.where(lo[0] == t_near, 0, jnp.where(lo[1] == t_near, 1, 2))
    hit = (t_near <= t_far) & (t_near > 0)
    return jnp.where(hit, t_near, jnp.inf), axis


def _safe_inv(d):
    return 1.0 / jnp.where(jnp.abs(d) < 1e-9, 1e-9, d)


def _cast(spec: RenderSpec, origin, cam_mat, rays, pos, mat, rgba):
    """One camera of one env: origin `[3]`, cam_mat `[3,3]`, rays `[P,3]`, boxes `[G,..]` -> `[P,3]`.

    The first `spec.num_aligned` boxes never rotate (world-aligned), so their slab test needs no
    per-box ray rotation or division; the rest are tested in their own frames.
    """
    na = spec.num_aligned
    size = jnp.asarray(spec.geom_size).T[:, :, None]  # [3, G, 1]
    d_world = cam_mat @ rays.T  # [3, P]
    rel = (origin[None] - pos).T[:, :, None]  # [3, G, 1]
    t_a, axis_a = _slab(rel[:, :na], _safe_inv(d_world)[:, None, :], size[:, :na])
    o_rot = jnp.einsum("gji,jg->ig", mat[na:], rel[:, na:, 0])[:, :, None]  # [3, Gr, 1]  R^T (o - p)
    d_rot = jnp.einsum("gji,jp->igp", mat[na:], d_world)  # [3, Gr, P]
    t_r, axis_r = _slab(o_rot, _safe_inv(d_rot), size[:, na:])
    t = jnp.concatenate([t_a, t_r], 0)  # [G, P]
    g = jnp.argmin(t, axis=0)  # [P]
    any_hit = jnp.isfinite(t.min(0))
    axis = jnp.take_along_axis(jnp.concatenate([axis_a, axis_r], 0), g[None], 0)[0]  # [P]
    rot = mat[g]  # [P, 3, 3]
    d_axis = jnp.take_along_axis(jnp.einsum("jp,pji->pi", d_world, rot), axis[:, None], -1)
    normal = jnp.einsum("pij,pj->pi", rot, jax.nn.one_hot(axis, 3) * -jnp.sign(d_axis))  # [P, 3]
    base = rgba[g, :3]
    ndotl = jnp.maximum(normal @ jnp.asarray(spec.light_dirs).T, 0.0)  # [P, L]
    light = jnp.asarray(spec.ambient) + ndotl @ jnp.asarray(spec.light_diffuse)
    light = light + jnp.maximum(normal @ cam_mat[:, 2], 0.0)[:, None] * jnp.asarray(spec.head_diffuse)
    color = jnp.clip(base * light, 0.0, 1.0)
    return jnp.where(any_hit[:, None], color, jnp.asarray(BACKGROUND, jnp.float32))


def render_jax(spec: RenderSpec, data: mjx.Data, geom_rgba: jax.Array) -> dict[str, jax.Array]:
    """Render one env (vmap for a batch). `geom_rgba` `[ngeom, 4]` -> `{camera: [H, W, 3] float32 in [0,1]}`."""
    ids = jnp.asarray(spec.geom_ids)
    pos, mat = data.geom_xpos[ids], data.geom_xmat[ids].reshape(-1, 3, 3)
    rgba = geom_rgba[ids]
    out = {}
    for c, (name, cam_id) in enumerate(zip(spec.cameras, spec.cam_ids)):
        cam_mat = data.cam_xmat[cam_id].reshape(3, 3)
        img = _cast(spec, data.cam_xpos[cam_id], cam_mat, jnp.asarray(spec.rays[c]), pos, mat, rgba)
        out[name] = img.reshape(spec.height, spec.width, 3)
    return out


class WarpRenderer:
    """MJX's Warp batch renderer for a fixed batch of `nworld` envs (`impl='warp'` model and data).

    The render context fixes `nworld` when it is created and a different batch silently returns
    `nworld` images, so `render_batch` checks the batch size and `check_batch` lets wrappers do so.
    Keep the renderer (and so its env) alive until its outputs are computed: MJX looks the context
    up by key at run time, and dispatch is asynchronous.
    """

    def __init__(self, mj_model: mujoco.MjModel, spec: RenderSpec, nworld: int):
        self.spec, self.nworld = spec, nworld
        cam_active = [i in spec.cam_ids for i in range(mj_model.ncam)]
        self.context = mjx.create_render_context(
            mjm=mj_model,
            nworld=nworld,
            cam_res=(spec.width, spec.height),
            cam_active=cam_active,
            render_rgb=True,
            render_depth=False,
            use_textures=False,
            use_shadows=False,
            enabled_geom_groups=list(RENDER_GROUPS),
            background_color=(*BACKGROUND, 1.0),
            enable_specular=False,
            enable_emission=False,
        )
        self.pytree = self.context.pytree()
        # Output index of each requested camera among the active ones (ascending MuJoCo id).
        active = sorted(spec.cam_ids)
        self._index = {name: active.index(cid) for name, cid in zip(spec.cameras, spec.cam_ids)}

    def check_batch(self, batch: int) -> None:
        if batch != self.nworld:
            raise ValueError(f"warp renderer was built for nworld={self.nworld} envs, got a batch of {batch}")

    def render(self, model: mjx.Model, data: mjx.Data, geom_rgba: jax.Array) -> dict[str, jax.Array]:
        """One env inside a `vmap` over exactly `nworld` envs -> `{camera: [H, W, 3] float32}`."""
        model = model.replace(geom_rgba=geom_rgba)
        data = mjx.refit_bvh(model, data, self.pytree)
        rgb, _, _ = mjx.render(model, data, self.pytree)
        return {name: mjx.get_rgb(self.pytree, i, rgb) for name, i in self._index.items()}

    def render_batch(self, model: mjx.Model, data: mjx.Data, geom_rgba: jax.Array) -> dict[str, jax.Array]:
        """A batch `[nworld, ...]` of data and rgba -> `{camera: [nworld, H, W, 3]}`."""
        self.check_batch(data.qpos.shape[0])
        return jax.vmap(self.render, in_axes=(None, 0, 0))(model, data, geom_rgba)


def to_uint8(img: jax.Array, brightness: jax.Array | float = 1.0) -> jax.Array:
    """Scale float `[..., 3]` images in [0,1] by `brightness`, clip and quantize to uint8."""
    return jnp.round(jnp.clip(img * brightness, 0.0, 1.0) * 255.0).astype(jnp.uint8)
