"""The packaged MJCF in C MuJoCo: a scripted grasp lifts a cube by finger contact alone, the button
presses, and random controls keep the physics finite (no JAX compile; fast)."""

import mujoco
import numpy as np

from vlajax.envs.tabletop import scene


def _run(m, d, target, grip, n):
    for _ in range(n):
        d.ctrl[:3], d.ctrl[3] = target, grip
        for _ in range(5):
            mujoco.mj_step(m, d)


def test_grasp_lifts_cube_by_contact_and_button_presses():
    m = scene.load_model()
    d = mujoco.MjData(m)
    idx = scene.Index.of(m)
    d.qpos[list(idx.gripper_qpos)] = scene.HOME
    mujoco.mj_forward(m, d)
    cube = np.array(d.qpos[idx.cube_qpos[1] : idx.cube_qpos[1] + 3])  # the middle cube at (0, 0)
    _run(m, d, [*cube[:2], 0.12], scene.FINGER_OPEN, 40)
    _run(m, d, [*cube[:2], 0.008], scene.FINGER_OPEN, 40)
    _run(m, d, [*cube[:2], 0.008], 0.0, 20)  # close: the fingers stop on the cube faces
    finger = d.qpos[idx.finger_qpos[0]]
    assert abs(finger - scene.CUBE_HALF) < 0.003
    _run(m, d, [*cube[:2], 0.15], 0.0, 50)
    lifted = d.qpos[idx.cube_qpos[1] + 2]
    assert lifted > 0.12, lifted  # carried up with the gripper (no weld, no attachment)
    _run(m, d, [*cube[:2], 0.15], scene.FINGER_OPEN, 50)  # open: it falls back to the table
    assert d.qpos[idx.cube_qpos[1] + 2] < scene.CUBE_HALF + 0.005
    button = d.mocap_pos[idx.button_mocap]
    _run(m, d, [button[0], button[1], 0.1], 0.0, 40)
    _run(m, d, [button[0], button[1], 0.0], 0.0, 30)
    assert d.qpos[idx.button_qpos] < -scene.PRESSED_DEPTH


def test_random_controls_stay_finite():
    m = scene.load_model()
    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    lo, hi = m.actuator_ctrlrange.T
    for _ in range(400):
        d.ctrl[:] = rng.uniform(lo, hi)
        for _ in range(5):
            mujoco.mj_step(m, d)
    assert np.all(np.isfinite(d.qpos)) and np.all(np.isfinite(d.qvel))
    assert np.abs(d.qvel).max() < 50.0
