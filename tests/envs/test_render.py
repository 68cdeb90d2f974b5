"""The pure-JAX ray caster and MJX's Warp renderer draw the same picture of the same states.

Tolerance: both cast one ray through each pixel centre with MuJoCo-Warp's camera convention and
shade with the same Lambert + ambient + headlight model, so they differ only by float rounding,
Warp's fast-math and 8-bit packing (at most 1-2 levels of 255 per channel) and, on silhouettes,
by a ray grazing an edge that one side counts as hit and the other as missed (a handful of pixels
per frame). So: mean |difference| < 1 level, and fewer than 1% of channel values differ by more
than 2 levels. A wrong camera pose, fovy, colour or light would break both bounds by far (a
one-pixel image shift alone moves ~10% of the values by more than 2 levels).
"""

import jax
import numpy as np
import pytest

from vlajax.envs import registry, wrappers

B = 4


def _render_both(name, steps):
    warp_env = registry.load(name, physics_impl="warp", render_backend="warp", num_envs=B)
    jax_env = registry.load(name)  # jax physics + jax ray caster
    keys = jax.random.split(jax.random.PRNGKey(5), B)
    state = jax.jit(jax.vmap(warp_env.reset))(keys)
    if steps:  # move the gripper and fingers so the wrist camera and contacts change
        actions = jax.numpy.tile(jax.numpy.array([0.6, 0.4, -0.8, 0.5]), (B, 1))
        step = jax.jit(jax.vmap(warp_env.step))
        for _ in range(steps):
            state = step(state, actions)
    warp_imgs = state.obs
    # Render the *same* warp-simulated states with the JAX caster (positions only; impl-agnostic).
    jax_imgs = jax.jit(jax.vmap(jax_env.render))(state.data, state.info["episode"])
    # Finish while `warp_env` (which owns the Warp render context) is alive: dispatch is async.
    return jax.device_get((warp_imgs, jax_imgs))


@pytest.mark.parametrize("name,steps", [("goal/stack", 0), ("object/pick_blue", 6)])
def test_warp_and_jax_renderers_agree(name, steps):
    warp_imgs, jax_imgs = _render_both(name, steps)
    for cam in ("agentview", "wrist"):
        a = np.asarray(warp_imgs[f"pixels/{cam}"]).astype(np.int32)
        b = np.asarray(jax_imgs[cam]).astype(np.int32)
        assert a.shape == b.shape == (B, 64, 64, 3)
        diff = np.abs(a - b)
        assert diff.mean() < 1.0, (cam, diff.mean())
        assert (diff > 2).mean() < 0.01, (cam, (diff > 2).mean())
        assert a.std() > 10  # a real picture, not two blank frames
    # ... and a shifted image would fail the bound (the tolerance is discriminative).
    a = np.asarray(warp_imgs["pixels/agentview"]).astype(np.int32)
    shifted = np.roll(np.asarray(jax_imgs["agentview"]).astype(np.int32), 1, axis=2)
    assert (np.abs(a - shifted) > 2).mean() > 0.01


def test_warp_batch_must_match_nworld():
    env = registry.load("goal/stack", physics_impl="warp", render_backend="warp", num_envs=B)
    with pytest.raises(ValueError, match="nworld=4"):
        wrappers.VmapWrapper(env, num_envs=B + 1)
