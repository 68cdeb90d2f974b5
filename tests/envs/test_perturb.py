"""Perturbation axes (`vlajax.envs.perturb`): level 0 is bit-identical to the unperturbed env, the
highest level changes what the axis names, and one compiled reset/step serves every level."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.envs import perturb, registry
from vlajax.envs.tabletop import scene, tasks

TASK = "goal/stack"
STEPS = 3


def _rollouts(steps: int):
    """An unperturbed episode and, from the same key, one per (axis, level 0 / max): the reset
    state and `steps` steps stacked on a leading axis ([steps + 1, 1, ...]); levels are a traced
    argument of one compiled function (one level vector per call, as the robustness eval runs)."""
    env = registry.load(TASK, image_size=16)
    keys = jax.random.PRNGKey(3)[None]
    task = jnp.full((1,), env.task_id, jnp.int32)
    actions = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (steps, 1, 4)), jnp.float32)

    def episode(reset):
        def body(s, a):
            s = jax.vmap(env.step)(s, a)
            return s, s
        first = reset()
        if not steps:
            return jax.tree.map(lambda a: a[None], first)
        rest = jax.lax.scan(body, first, actions)[1]
        return jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def perturbed(levels):
        return episode(lambda: jax.vmap(lambda k, t: env.reset_task(k, t, levels=levels))(keys, task))

    base = jax.device_get(jax.jit(lambda: episode(lambda: jax.vmap(env.reset_task)(keys, task)))())
    rows = {(a.name, lv): jax.device_get(perturbed(jnp.asarray(perturb.levels(**{a.name: lv}))))
            for a in perturb.AXES for lv in (0, a.max_level)}
    return env, base, rows


@pytest.fixture(scope="module")
def resets():
    """Reset states only (cheap to compile: no physics step)."""
    return _rollouts(0)


@pytest.fixture(scope="module")
def rollouts():
    """The reset state and STEPS physics steps (compiles the MJX step twice: slow tests)."""
    return _rollouts(STEPS)


def _strip(state):
    """Everything of a state but the perturbation parameters (absent from an unperturbed one)."""
    episode = {k: v for k, v in state.info["episode"].items() if k != "perturb"}
    return (state.data, state.obs, state.reward, state.done, state.metrics, {**state.info, "episode": episode})


def _bits(v):
    v = np.asarray(v)
    return v.reshape(-1).view(np.uint8) if v.dtype.kind == "f" else v  # -0.0 != 0.0 here


def _identical(runs, axis):
    _, base, rows = runs
    a, b = jax.tree.leaves(_strip(base)), jax.tree.leaves(_strip(rows[axis, 0]))
    assert len(a) == len(b)
    for x, y in zip(a, b):  # the reset state and every step
        np.testing.assert_array_equal(_bits(x), _bits(y))


@pytest.mark.parametrize("axis", perturb.NAMES)
def test_level_zero_reset_is_bit_identical(resets, axis):
    _identical(resets, axis)


@pytest.mark.slow
@pytest.mark.parametrize("axis", perturb.NAMES)
def test_level_zero_steps_are_bit_identical(rollouts, axis):
    _identical(rollouts, axis)


def _top(runs):
    env, base, rows = runs
    top = {a.name: jax.tree.map(lambda x: np.asarray(x)[:, 0], rows[a.name, a.max_level]) for a in perturb.AXES}
    return env, top, jax.tree.map(lambda x: np.asarray(x)[:, 0], base)


def test_highest_levels_change_what_they_name(resets):
    env, top, b = _top(resets)
    idx = env.idx
    img = lambda s, cam="agentview": s.obs[f"pixels/{cam}"][0].astype(np.int32)
    img_diff = lambda s, cam="agentview": np.abs(img(s, cam) - img(b, cam)).mean()
    q0 = b.data.qpos[0]

    s = top["camera"]  # the pixels move, the physics does not
    assert img_diff(s) > 5 and img_diff(s, "wrist") > 5
    np.testing.assert_array_equal(s.data.qpos, b.data.qpos)
    s = top["lighting"]  # colours and brightness change, the physics does not
    assert img_diff(s) > 3
    assert np.abs(s.info["episode"]["geom_rgba"][0] - b.info["episode"]["geom_rgba"][0]).max() > 0.05
    np.testing.assert_array_equal(s.data.qpos, b.data.qpos)
    s = top["distractors"]  # both shapes on the table (in view); parked far away when unperturbed
    d = s.data.mocap_pos[0][list(idx.distractor_mocap)]
    assert np.all(np.abs(d[:, :2]) < 0.3) and np.all(d[:, 2] > 0)
    assert (img(s) != img(b)).any(-1).sum() >= 2  # pixels of the agent view show them
    np.testing.assert_array_equal(b.data.mocap_pos[0][list(idx.distractor_mocap)],
                                  np.broadcast_to(scene.PARKED, d.shape))
    s = top["layout"]  # cubes, square and button beyond the goal layout's 1 cm jitter
    cube = lambda q: np.stack([q[a:a + 2] for a in idx.cube_qpos])
    assert np.linalg.norm(cube(s.data.qpos[0]) - cube(q0), axis=-1).min() > 0.03
    assert np.linalg.norm((s.data.mocap_pos[0] - b.data.mocap_pos[0])[idx.zone_mocap]) > 0.03
    s = top["robot"]  # the gripper starts elsewhere
    g = list(idx.gripper_qpos)
    assert np.linalg.norm(s.data.qpos[0][g] - q0[g]) > 0.03
    s = top["language"]  # a held-out paraphrase, never a training instruction of any task
    first = lambda st: jax.tree.map(lambda x: x[0], st)
    text, train_text = env.instruction(first(s)), env.instruction(first(b))
    training = {t for task in tasks.TASKS for t in task.instructions()[: tasks.NUM_INSTRUCTIONS]}
    spec = registry.task_spec(TASK)
    colours = b.info["episode"]["colors"][0]
    assert train_text == spec.instruction(colours) and text == spec.instruction(colours, spec_level := 2)
    assert text == spec.paraphrases[spec_level - 1].format(target=scene.COLOR_NAMES[colours[spec.target]],
                                                          ref=scene.COLOR_NAMES[colours[spec.ref]], zone="")
    assert text not in training
    s = top["dynamics"]  # friction / mass / servo gain of the env's model, same start
    p = jax.tree.map(lambda x: x[0], s.info["episode"]["perturb"])
    m = perturb.dynamics_model(p, env.mjx_model, idx)
    np.testing.assert_allclose(np.asarray(m.geom_friction)[:, 0], 0.4 * np.asarray(env.mjx_model.geom_friction)[:, 0],
                               rtol=1e-6)
    cube_mass = lambda model: float(np.asarray(model.body_mass)[idx.cube_body[0]])
    assert np.isclose(cube_mass(m), 2.5 * cube_mass(env.mjx_model))
    np.testing.assert_array_equal(s.data.qpos[0], q0)
    s = top["noise"]  # images and proprio differ, the physics does not
    assert img_diff(s) > 2 and np.abs(s.obs["state"][0] - b.obs["state"][0]).max() > 1e-3
    np.testing.assert_array_equal(s.data.qpos, b.data.qpos)


@pytest.mark.slow
def test_highest_levels_over_steps(rollouts):
    env, top, b = _top(rollouts)
    g = list(env.idx.gripper_qpos)
    s = top["dynamics"]  # the same actions move the gripper differently
    assert np.abs(s.data.qpos[-1][g] - b.data.qpos[-1][g]).max() > 1e-4
    s = top["noise"]  # fresh noise at every step, physics untouched
    assert np.abs(s.obs["state"][-1] - b.obs["state"][-1]).max() > 1e-3
    assert not np.array_equal(s.obs["pixels/agentview"][-1], s.obs["pixels/agentview"][-2])
    np.testing.assert_array_equal(s.data.qpos, b.data.qpos)


def test_specs_and_sampling():
    assert perturb.parse_ranges("camera=0:2, lighting=1") == {"camera": (0.0, 2.0), "lighting": (1.0, 1.0)}
    for bad in ("language=0:1", "camera=0:9", "cam=0:1", "camera", "distractors=0.5:1"):
        with pytest.raises(ValueError):
            perturb.parse_ranges(bad)
    assert perturb.parse_eval("all")["distractors"] == (1, 2)
    assert perturb.parse_eval("camera=2:3,noise") == {"camera": (2, 3), "noise": (1, 2, 3)}
    lo, hi = perturb.range_arrays({"camera": (0.0, 2.0), "distractors": (1.0, 2.0)})
    lv = np.asarray(jax.vmap(lambda k: perturb.sample_levels(k, lo, hi))(jax.random.split(jax.random.PRNGKey(0), 256)))
    cam, dis = lv[:, perturb.NAMES.index("camera")], lv[:, perturb.NAMES.index("distractors")]
    assert cam.min() >= 0 and cam.max() <= 2 and len(np.unique(cam)) > 200
    assert set(np.unique(dis)) == {1.0, 2.0}
    assert np.all(np.delete(lv, [perturb.NAMES.index("camera"), perturb.NAMES.index("distractors")], 1) == 0)


def test_randomize_draws_levels_per_episode():
    """Domain randomization: every reset draws the named axes' levels from their ranges; the
    held-out language axis is refused, as are unknown axes and bad ranges."""
    env = registry.load(TASK, image_size=16, obs_mode="state",
                        randomize=(("camera", 0.0, 2.0), ("distractors", 1.0, 2.0)))
    states = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 16))
    lv = np.asarray(states.info["episode"]["perturb"]["levels"])
    cam, dis = lv[:, perturb.NAMES.index("camera")], lv[:, perturb.NAMES.index("distractors")]
    assert cam.min() >= 0 and cam.max() <= 2 and len(np.unique(cam)) == 16
    assert set(np.unique(dis)) == {1.0, 2.0}
    others = np.delete(lv, [perturb.NAMES.index("camera"), perturb.NAMES.index("distractors")], 1)
    np.testing.assert_array_equal(others, 0)
    placed = (np.asarray(states.data.mocap_pos)[:, list(env.idx.distractor_mocap), 2] > -1).sum(1)
    np.testing.assert_array_equal(placed, dis)  # as many distractors on the table as the level says
    for bad in ((("language", 0.0, 1.0),), (("cam", 0.0, 1.0),), (("camera", 2.0, 1.0),)):
        with pytest.raises(ValueError):
            registry.load(TASK, obs_mode="state", randomize=bad)
