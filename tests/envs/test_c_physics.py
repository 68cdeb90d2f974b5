"""`physics_impl="c"`: the tabletop tasks stepped by C MuJoCo through a host callback."""

import threading

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from vlajax.config.schema import ConfigError, EnvConfig
from vlajax.envs import registry
from vlajax.envs.tabletop import c_physics
from vlajax.envs.tabletop.env import TabletopConfig

TASK = "goal/stack"
B, STEPS = 2, 8


def _c_env(**kw):
    return registry.load(TASK, physics_impl="c", obs_mode="state", **kw)


def _packed(data, inputs):
    """The packed float64 input row of one env's `mjx.Data` (`CPhysics.layout`'s input fields)."""
    return np.concatenate([np.ravel(np.asarray(getattr(data, k), np.float64)) for k in inputs])


def test_host_step_is_one_continuous_c_simulation():
    """Two callback steps (state and warm start carried through the packed arrays) equal ten
    substeps of one MjData in float64, bit for bit: every field is read and written back."""
    env = _c_env()
    state = jax.jit(env.reset)(jax.random.key(0))
    data = state.data.replace(ctrl=jnp.asarray([0.05, -0.1, 0.2, 0.01]))
    inputs, outputs = c_physics.CPhysics.layout(data)
    row = _packed(data, inputs)
    phys = env.c_physics
    first = phys.step_host(inputs, outputs, row[None])[0]
    # the next call starts from the first's state fields (same layout as the inputs' first ones)
    n_state = sum(int(np.prod(inputs[k])) for k in c_physics.STATE_FIELDS if k in inputs)
    second = phys.step_host(inputs, outputs, np.concatenate([first[:n_state], row[n_state:]])[None])[0]

    m = env.mj_model
    d = mujoco.MjData(m)
    d.qpos[:], d.ctrl[:] = np.asarray(data.qpos, np.float64), np.asarray(data.ctrl, np.float64)
    d.mocap_pos[:], d.mocap_quat[:] = np.asarray(data.mocap_pos), np.asarray(data.mocap_quat)
    mujoco.mj_step(m, d, nstep=2 * env.config.n_substeps)
    mujoco.mj_kinematics(m, d)
    split = dict(zip(outputs, np.split(second, np.cumsum([int(np.prod(s)) for s in outputs.values()])[:-1])))
    np.testing.assert_array_equal(split["qpos"], d.qpos)
    np.testing.assert_array_equal(split["qvel"], d.qvel)
    np.testing.assert_array_equal(split["qacc_warmstart"], d.qacc_warmstart)
    np.testing.assert_array_equal(split["geom_xpos"], d.geom_xpos.ravel())
    assert split["time"][0] == pytest.approx(2 * env.config.n_substeps * m.opt.timestep)
    assert np.abs(split["qacc_warmstart"]).max() > 0  # the warm start is really carried
    # the reset's poses are C MuJoCo's too: the button moves with its (mocap) base from the start
    base, button = env.mj_model.geom("button_base").id, env.mj_model.geom("button").id
    np.testing.assert_allclose(np.asarray(state.data.geom_xpos)[button, :2],
                               np.asarray(state.data.geom_xpos)[base, :2], atol=1e-6)
    assert np.abs(np.asarray(state.data.mocap_pos)[env.idx.button_mocap, :2] - [-0.13, 0.15]).max() > 1e-4


def test_c_follows_mjx_on_the_same_task():
    """The same resets and random actions, batched under vmap: C MuJoCo tracks MJX closely
    (float64 vs float32 and separate solver code: close, not equal)."""
    envs = {impl: registry.load(TASK, physics_impl=impl, obs_mode="state") for impl in ("jax", "c")}
    actions = jax.random.uniform(jax.random.key(1), (STEPS, B, 4), minval=-1, maxval=1)
    out = {}
    for impl, env in envs.items():
        step = jax.jit(jax.vmap(env.step))
        s = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(0), B))
        qpos, rewards = [], []
        for a in actions:
            s = step(s, a)
            qpos.append(np.asarray(s.data.qpos))
            rewards.append(np.asarray(s.reward))
        out[impl] = np.stack(qpos), np.stack(rewards), np.asarray(s.obs), s
    (q_jax, r_jax, o_jax, _), (q_c, r_c, o_c, s_c) = out["jax"], out["c"]
    assert np.abs(q_jax[-1] - q_jax[0]).max() > 0.01  # the arm moved
    np.testing.assert_allclose(q_c, q_jax, atol=2e-3)
    np.testing.assert_allclose(r_c, r_jax, atol=2e-3)
    np.testing.assert_allclose(o_c, o_jax, atol=2e-3)
    # positional fields are current: the callback's geom poses are MJX kinematics of its qpos, except
    # below a moved mocap body (the button under its base), which MJX's kinematics leaves at the
    # model's default pose while C MuJoCo moves it along (mujoco_warp fixed the same in PR #858)
    from mujoco import mjx
    m = envs["c"].mj_model
    kin = jax.jit(jax.vmap(lambda d: mjx.kinematics(envs["c"].mjx_model, d)))(s_c.data)  # one compile, not op by op
    under_mocap = [m.body_mocapid[m.body_parentid[b]] >= 0 for b in m.geom_bodyid]
    keep = ~np.asarray(under_mocap)
    assert keep.sum() >= m.ngeom - 1
    np.testing.assert_allclose(np.asarray(s_c.data.geom_xpos)[:, keep], np.asarray(kin.geom_xpos)[:, keep], atol=1e-5)


def test_concurrent_callers_get_their_own_data():
    """Slots step in their own threads: concurrent calls give the sequential results."""
    env = _c_env()
    step = jax.jit(jax.vmap(env.step))
    starts = [jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(k), B)) for k in range(3)]
    action = jnp.full((B, 4), 0.5)
    expected = [np.asarray(step(s, action).data.qpos) for s in starts]
    got: dict[int, np.ndarray] = {}

    def run(k):
        for _ in range(5):
            got[k] = np.asarray(step(starts[k], action).data.qpos)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for k in range(3):
        np.testing.assert_array_equal(got[k], expected[k])


def test_config_accepts_c_and_rejects_unknown():
    assert EnvConfig(physics_impl="c").physics_impl == "c"
    with pytest.raises(ConfigError, match="physics_impl='warp'"):
        EnvConfig(physics_impl="c", render_backend="warp")
    with pytest.raises(ValueError, match="physics_impl"):
        TabletopConfig(physics_impl="mujoco")
    with pytest.raises(ValueError, match="n_substeps"):
        c_physics.CPhysics(_c_env().mj_model, 0)


# slow (the RL workload compiled for both simulators); fast default tests cover its parts: the async
# slots stepping C MuJoCo (tests/pipeline/test_bench_async_loops.py::test_cpu_regimes_through_the_production_loops)
# and C following MJX on the same resets and actions (test_c_follows_mjx_on_the_same_task above)
@pytest.mark.slow
def test_rl_workload_slots_step_with_c_physics():
    """The async pipeline's slots (the bench's CPU-bound regime) run the RL core's decision on C
    MuJoCo: same sample, and rewards / next observations as the MJX slot to within 2e-3."""
    import dataclasses

    import vlajax.config.presets  # noqa: F401
    from vlajax.config.schema import get_config
    from vlajax.rl.async_workload import RLWorkload
    from vlajax.rl.setup import build

    cfg = get_config("rl-debug")
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, num_envs=4))
    work = RLWorkload(cfg, build(cfg))
    params = work.init_state(0).params
    recs = {}
    for impl in ("jax", "c"):
        reset, step, infer = work.env(2, None, physics_impl=impl)
        env_state, payload = reset(0)
        (out,) = infer(params, [payload])
        (state, d), nxt, rec = step(0, env_state, out)
        assert d == 1
        recs[impl] = rec, nxt
    (rec_j, nxt_j), (rec_c, nxt_c) = recs["jax"], recs["c"]
    np.testing.assert_array_equal(np.asarray(rec_c["actions"]), np.asarray(rec_j["actions"]))
    np.testing.assert_allclose(np.asarray(rec_c["rewards"]), np.asarray(rec_j["rewards"]), atol=2e-3)
    np.testing.assert_allclose(np.asarray(nxt_c["obs"]), np.asarray(nxt_j["obs"]), atol=2e-3)
    assert not np.array_equal(np.asarray(nxt_c["obs"]), np.asarray(nxt_j["obs"]))  # two simulators ran


def _reference_loop(m, n_substeps, inputs, outputs, rows, nstep):
    """The per-env loop the batch replaced: one MjData, `mj_step` env after env, then the poses."""
    d = mujoco.MjData(m)
    out = []
    for row in rows:
        for k, part in zip(inputs, np.split(row, np.cumsum([int(np.prod(s)) for s in inputs.values()])[:-1])):
            if k == "time":
                d.time = float(part[0])
            else:
                getattr(d, k)[:] = part.reshape(getattr(d, k).shape)
        if nstep:
            mujoco.mj_step(m, d, nstep=nstep)
        mujoco.mj_kinematics(m, d)
        mujoco.mj_camlight(m, d)
        out.append(np.concatenate([np.ravel(getattr(d, k)) for k in outputs]))
    return np.stack(out).astype(rows.dtype)


@pytest.mark.parametrize("per_env", [False, True])
def test_batched_host_step_equals_the_per_env_mj_step_loop(per_env):
    """The native batch (one call, or env by env under `host_timing(per_env=True)`) gives bit for bit
    what `mj_step` + `mj_kinematics` + `mj_camlight` on one MjData per env gives, over several control
    steps (state and warm start carried) and for the pose-only call of a reset."""
    env = _c_env()
    n = 6
    s = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(3), n))
    one = jax.tree.map(lambda x: x[0], s.data)
    inputs, outputs = c_physics.CPhysics.layout(one)
    rows = np.stack([np.concatenate([np.ravel(np.asarray(getattr(s.data, k)[i], np.float32)) for k in inputs])
                     for i in range(n)])
    start = rows
    n_state = sum(int(np.prod(inputs[k])) for k in c_physics.STATE_FIELDS if k in inputs)
    ctrl_at = n_state  # ctrl follows the state fields in the packing order
    rng = np.random.default_rng(0)
    m = env.mj_model
    ns = env.config.n_substeps
    first = c_physics.CPhysics(m, ns)  # fresh pools: the first call of a new batch is exact too
    want = _reference_loop(m, ns, inputs, outputs, rows, ns)
    np.testing.assert_array_equal(first.step_host(inputs, outputs, rows), want)
    phys = c_physics.CPhysics(m, ns)
    with c_physics.host_timing(per_env=per_env) as tm:
        np.testing.assert_array_equal(phys.step_host(inputs, outputs, rows, nstep=0),
                                      _reference_loop(m, 0, inputs, outputs, rows, 0))
        for _ in range(3):
            rows = rows.copy()
            rows[:, ctrl_at:ctrl_at + 4] = rng.uniform(-0.2, 0.2, (n, 4)).astype(np.float32)
            got = phys.step_host(inputs, outputs, rows)
            want = _reference_loop(m, env.config.n_substeps, inputs, outputs, rows, env.config.n_substeps)
            np.testing.assert_array_equal(got, want)
            rows = np.concatenate([got[:, :n_state], rows[:, n_state:]], axis=1)
    assert tm.calls == 3 and len(tm.env_step_s) == (3 * n if per_env else 0)
    assert np.abs(rows[:, :n_state] - start[:, :n_state]).max() > 1e-4  # the envs moved
