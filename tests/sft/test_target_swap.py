"""Object-suite target swap (`data.demo_target_swap`, `vlajax.data.demos.swap_target`): the same
picture, another cube as the target, the instruction naming its colour."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import ConfigError, get_config
from vlajax.data.demos import generate, swap_target
from vlajax.envs import registry
from vlajax.envs.tabletop import scene


def _env():
    return registry.load("object/pick_red", {"image_size": 16, "cameras": ("agentview", "wrist")})


@pytest.mark.slow  # an MJX reset + render to compile (~2-4 min on 2 shared cores)
def test_swap_keeps_the_picture_and_names_the_new_target():
    env = _env()
    tid = jnp.int32(registry.ALL_ENVS.index("object/pick_red"))
    state = jax.jit(lambda k: env.reset_task(k, tid))(jax.random.key(4))
    swap = jax.jit(lambda s, k: swap_target(env, s, k))
    same = swap(state, jnp.int32(0))
    for key in ("pixels/agentview", "pixels/wrist", "state", "instruction_id"):
        np.testing.assert_array_equal(same.obs[key], state.obs[key])  # k = 0: unchanged
    colors = np.asarray(state.info["episode"]["colors"])
    assert scene.COLOR_NAMES[colors[0]] == "red"
    cube = lambda s, i: np.asarray(s.data.qpos[env.idx.cube_qpos[i]:env.idx.cube_qpos[i] + 3])
    for k in (1, 2):
        out = swap(state, jnp.int32(k))
        for cam in ("pixels/agentview", "pixels/wrist"):
            np.testing.assert_array_equal(out.obs[cam], state.obs[cam])  # the same scene on camera
        np.testing.assert_allclose(cube(out, 0), cube(state, k))  # the target stands where cube k stood
        np.testing.assert_allclose(cube(out, k), cube(state, 0))
        text = env.instruction(out)
        assert text.startswith(f"pick up the {scene.COLOR_NAMES[colors[k]]} cube")  # names the new target
        assert text.endswith(f"the {scene.COLOR_NAMES[colors[3]]} square")  # the square is unchanged
        np.testing.assert_allclose(np.asarray(out.data.xpos[env.idx.cube_body[0]]), cube(state, k), atol=1e-6)


def test_refused_outside_the_object_suite(tmp_path):
    cfg = get_config("sft-tiny")
    cfg = cfg.replace(data=dataclasses.replace(cfg.data, demo_target_swap=True))  # sft-tiny: the goal suite
    with pytest.raises(ConfigError, match="object suite"):
        generate(cfg, str(tmp_path / "demos"))


@pytest.mark.slow  # MJX resets + renders and a few prefix steps to compile (~2-4 min on 2 shared cores)
def test_binding_probe_saves_an_init_from_source(tmp_path):
    """experiments/object_suite_binding.py --save-init: the trained prefix loads into an SFT state."""
    import pathlib
    import subprocess
    import sys

    from vlajax.policies.run_files import init_fn
    from vlajax.sft import init_from
    from vlajax.training import sharding

    script = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "object_suite_binding.py"
    src = str(tmp_path / "ground")
    subprocess.run([sys.executable, str(script), "--debug", "--save-init", src], check=True, timeout=600)
    cfg = get_config("sft-small")
    cfg = cfg.replace(model=dataclasses.replace(cfg.model, aux_target="grasp_place", use_state_token=False),
                      sft=dataclasses.replace(cfg.sft, init_from=src))
    mesh = sharding.make_mesh(cfg.mesh)
    fresh, _ = sharding.init_sharded(init_fn(cfg, ("agentview", "wrist")), mesh, cfg.mesh.logical_rules,
                                     jax.random.key(123))
    loaded = init_from.load_into(cfg, fresh, mesh)  # as vlajax.sft.loop.train calls it
    emb = lambda s: np.asarray(s.params["embed"]["embedding"])
    assert not np.allclose(emb(loaded), emb(fresh))  # the probe's text embedding, not a fresh one
