"""The tabletop MJCF's excluded collision pair (palm vs button cap) can never touch, and excluding it
leaves MJX's physics unchanged to float32 rounding (real MJX, two models, the same controls)."""

import re

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from vlajax.envs.tabletop import scene


def _geom_z(m, name):
    return float(m.geom_pos[m.geom(name).id][2]), float(m.geom_size[m.geom(name).id][2])


def test_palm_never_reaches_the_button_cap():
    m = scene.load_model()
    # palm bottom in world z = gz + pos - half >= the z joint's lower limit + pos - half
    pos, half = _geom_z(m, "palm")
    palm_bottom = m.jnt_range[m.joint("gz").id][0] + pos - half
    # cap top = base mocap z (0: reset sets only x, y) + button body z + joint (<= its upper limit 0) + half
    _, cap_half = _geom_z(m, "button")
    cap_top = m.body_pos[m.body("button").id][2] + m.jnt_range[m.joint("button").id][1] + cap_half
    assert m.geom_bodyid[m.geom("palm").id] == m.body("gripper").id
    assert palm_bottom - cap_top > 0.03, (palm_bottom, cap_top)  # 3.8 cm: far beyond any soft-limit give
    assert m.actuator_ctrlrange[m.actuator("az").id][0] >= m.jnt_range[m.joint("gz").id][0]  # no servo below it


def _pairs(m):
    return mjx.make_data(m, impl="jax")._impl.ncon  # contact slots MJX computes at every step


def test_exclude_removes_only_the_palm_button_contacts():
    m = scene.load_model()
    full = _model_without_exclude()
    assert m.nexclude == 1 and full.nexclude == 0
    assert _pairs(full) - _pairs(m) == 4  # MJX's box-box pair yields 4 contact slots
    # the fingers (their own bodies) still collide with the button cap
    finger, button = m.geom("finger_l").id, m.geom("button").id
    assert m.geom_contype[finger] & m.geom_conaffinity[button]
    assert m.geom_bodyid[finger] != m.body("gripper").id


def _model_without_exclude() -> mujoco.MjModel:
    xml = re.sub(r"<contact>.*?</contact>", "", scene.ASSET.read_text(), flags=re.S)
    return mujoco.MjModel.from_xml_string(xml)


def _controls(m, n):
    """[2, n, 4] ctrl: env 0 presses the button with closed fingers, driving the gripper to its lowest
    target; env 1 grasps the middle cube, lifts it and sets it on the left one."""
    button = np.array([-0.13, 0.15])
    lo = m.jnt_range[m.joint("gz").id][0]
    seq0 = [(*button, 0.1, 0.0)] * (n // 4) + [(*button, lo, 0.0)] * (n - n // 4)
    c = n // 6
    seq1 = ([(0.0, -0.02, 0.1, 0.045)] * c + [(0.0, -0.02, 0.008, 0.045)] * c + [(0.0, -0.02, 0.008, 0.0)] * c
            + [(0.0, -0.02, 0.15, 0.0)] * c + [(-0.12, -0.08, 0.15, 0.0)] * c)
    seq1 += [(-0.12, -0.08, 0.05, 0.0)] * (n - len(seq1))
    return np.asarray([seq0, seq1], np.float32)


def _start(mj_model):
    idx = scene.Index.of(mj_model)
    qpos = np.array(mj_model.qpos0)
    qpos[list(idx.gripper_qpos)] = scene.HOME
    for i, adr in enumerate(idx.cube_qpos):
        qpos[adr: adr + 3] = (*scene.GOAL_LAYOUT[i], scene.CUBE_HALF)
    mocap = np.zeros((mj_model.nmocap, 3))
    mocap[idx.button_mocap, :2] = (-0.13, 0.15)
    mocap[idx.zone_mocap, :2] = scene.ZONE_FIXED
    mocap[list(idx.distractor_mocap)] = scene.PARKED
    return mjx.make_data(mj_model, impl="jax").replace(qpos=jnp.asarray(qpos), mocap_pos=jnp.asarray(mocap))


def _control_step(m):
    return lambda d, u: jax.lax.fori_loop(0, 5, lambda _, x: mjx.step(m, x), d.replace(ctrl=u))


_CARRY = ("qpos", "qvel", "act", "ctrl", "mocap_pos", "mocap_quat", "qacc_warmstart", "time")


@pytest.mark.slow  # two MJX compiles, ~50 s of CPU
def test_mjx_physics_matches_the_model_without_the_exclude():
    """Every control step (5 MJX steps) of two scripted episodes, from the same state under both models.
    Env 0 presses the button with the gripper at its lowest (where the excluded pair would be closest):
    the same next state to float32 rounding. Env 1 grasps, lifts and stacks a cube; there a contact
    step turns a rounding difference into up to ~1e-4 (the solver's tolerance-based early exit), so its
    difference is compared with the physics' own sensitivity: the same step with qvel moved by one ulp."""
    m, full = scene.load_model(), _model_without_exclude()
    mx, fx = mjx.put_model(m, impl="jax"), mjx.put_model(full, impl="jax")
    ctrl = jnp.asarray(_controls(m, 120))
    step, step_full = _control_step(mx), _control_step(fx)
    d_full0 = _start(full)
    ulp = lambda d: d.replace(qvel=jnp.nextafter(d.qvel, jnp.inf))

    def run(c):
        def body(d, u):
            nxt = step(d, u)
            as_full = d_full0.replace(**{k: getattr(d, k) for k in _CARRY})
            ref, ref_ulp, nxt_ulp = step_full(as_full, u), step_full(ulp(as_full), u), step(ulp(d), u)
            return nxt, [(x.qpos, x.qvel) for x in (nxt, ref, ref_ulp, nxt_ulp)]

        return jax.lax.scan(body, _start(m), c)[1]

    (q1, v1), (q0, v0), (q0u, v0u), (q1u, v1u) = jax.tree.map(np.asarray, jax.jit(jax.vmap(run))(ctrl))
    idx = scene.Index.of(m)
    assert q1[0, -1, idx.button_qpos] < -scene.PRESSED_DEPTH  # the button was pressed, gripper at its lowest
    assert q1[1, :, idx.cube_qpos[1] + 2].max() > 0.1  # the middle cube was lifted (contacts all along)
    np.testing.assert_allclose(q1[0], q0[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(v1[0], v0[0], rtol=0, atol=1e-4)
    for a, b, ua, ub in ((q1, q0, q1u, q0u), (v1, v0, v1u, v0u)):
        sensitivity = max(np.abs(a[1] - ua[1]).max(), np.abs(b[1] - ub[1]).max())
        assert np.abs(a[1] - b[1]).max() <= 5 * sensitivity, (np.abs(a[1] - b[1]).max(), sensitivity)
