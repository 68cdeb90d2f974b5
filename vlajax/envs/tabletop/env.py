"""`TabletopEnv`: one language-conditioned task of the suite on MJX, with its config next to it.

Action `[4]` float in [-1, 1] (out-of-range values are clipped, not rejected):
  0-2: end-effector position target relative to its current position, x/y/z, in units of
       `max_delta` metres (a position servo tracks it; full action moves ~1 cm per control step);
  3:   gripper, -1 fully open .. +1 fully closed (the finger target interpolates linearly).
Observation: `obs_mode="state"` gives a flat float32 `[32]` vector (proprio + object state + task
one-hots; brax-compatible); `obs_mode="pixels"` gives `{"state": [8] proprio, "pixels/<camera>":
[H, W, 3] uint8, "instruction_id": [] int32}`. The instruction text is `env.instructions[id]`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from mujoco import mjx

from vlajax.envs import perturb
from vlajax.envs import render as render_lib
from vlajax.envs.base import Env, State
from vlajax.envs.tabletop import c_physics, scene, tasks
from vlajax.shared.robots import image_key

PROPRIO_SIZE = 8  # ee xyz, finger l/r, ee velocity xyz
# `privileged_state`: proprio, cube xyz, zone xy, button xy + depth, target/ref cube and family one-hots
PRIVILEGED_SIZE = PROPRIO_SIZE + 3 * scene.NUM_CUBES + 2 + 3 + 2 * scene.NUM_CUBES + len(tasks.FAMILIES)


def default_reward_scales() -> dict[str, float]:
    return {"success": 10.0, "reach": 0.1, "lift": 0.5, "place": 1.0, "press": 1.0}


@dataclasses.dataclass(frozen=True)
class TabletopConfig:
    """Everything a tabletop task needs besides its `TaskSpec`."""

    obs_mode: str = "pixels"  # "pixels": cameras + proprio; "state": flat privileged state vector
    image_size: int = 64  # square camera resolution (pixels)
    cameras: tuple[str, ...] = ("agentview", "wrist")  # cameras in the pixels observation
    render_backend: str = "jax"  # "jax" ray caster (CPU default) or "warp" (MJX-Warp renderer)
    # "jax" or "warp": MJX implementations (the warp renderer needs "warp"); "c": C MuJoCo on the
    # host through a callback (LIBERO-style CPU simulator; c_physics.py)
    physics_impl: str = "jax"
    num_envs: int = 16  # batch the warp renderer is built for (its nworld); unused by "jax"
    n_substeps: int = 5  # physics steps (4 ms) per control step -> 50 Hz control
    max_delta: float = 0.02  # metres of end-effector target motion per unit action per control step
    brightness: tuple[float, float] = (0.75, 1.25)  # per-episode image brightness factor range
    reward_scales: Mapping[str, float] = dataclasses.field(default_factory=default_reward_scales)
    # pixels mode: also `obs["privileged"]` = `privileged_state` [32], for an asymmetric critic
    # (RL's `rl.critic='privileged'`); the policy never reads it
    privileged_obs: bool = False
    # domain randomization: ((axis, lo, hi), ...) -- every reset draws each named perturbation
    # axis's level from [lo, hi] (`vlajax.envs.perturb`; the held-out `language` axis is refused)
    randomize: tuple[tuple[str, float, float], ...] = ()

    def __post_init__(self):
        if self.obs_mode not in ("pixels", "state"):
            raise ValueError(f"obs_mode must be 'pixels' or 'state', got {self.obs_mode!r}")
        if self.render_backend not in ("jax", "warp") or self.physics_impl not in ("jax", "warp", "c"):
            raise ValueError("render_backend must be 'jax' or 'warp', physics_impl 'jax', 'warp' or 'c'")
        if self.render_backend == "warp" and self.physics_impl != "warp":
            raise ValueError("render_backend='warp' needs physics_impl='warp' (MJX renders only Warp data)")
        if self.image_size < 8 or self.n_substeps < 1 or self.num_envs < 1:
            raise ValueError("image_size >= 8, n_substeps >= 1 and num_envs >= 1 are required")
        unknown = set(self.cameras) - {"agentview", "wrist"}
        if unknown or not self.cameras:
            raise ValueError(f"cameras must be a non-empty subset of ('agentview', 'wrist'), got {self.cameras}")
        missing = {"success", *tasks.TERMS} - set(self.reward_scales)
        if missing:
            raise ValueError(f"reward_scales lacks terms {sorted(missing)}")
        spec = ",".join(f"{a}={lo}:{hi}" for a, lo, hi in self.randomize)
        perturb.parse_ranges(spec)  # ValueError on an unknown axis, a bad range or a held-out axis
        if any(a == "dynamics" for a, _, _ in self.randomize) and self.physics_impl != "jax":
            raise ValueError("randomizing the dynamics axis needs physics_impl='jax' (per-env MJX model fields)")


class TabletopEnv(Env):
    """A stateless tabletop task; all per-episode randomness is drawn in `reset` and kept in `State`."""

    def __init__(self, task: tasks.TaskSpec, config: TabletopConfig = TabletopConfig()):
        self.task, self.config = task, config
        self.task_id = tasks.TASKS.index(task)
        self.mj_model = scene.load_model()
        self.idx = scene.Index.of(self.mj_model)
        # this process's device: put_model's default, jax.devices()[0], belongs to process 0 when multi-host
        self._mjx_impl = "jax" if config.physics_impl == "c" else config.physics_impl  # "c": MJX data layout
        self.mjx_model = mjx.put_model(self.mj_model, device=jax.local_devices()[0], impl=self._mjx_impl)
        self.c_physics = c_physics.CPhysics(self.mj_model, config.n_substeps) if config.physics_impl == "c" else None
        self._ctrl_lo = jnp.asarray(self.mj_model.actuator_ctrlrange[:3, 0])
        self._ctrl_hi = jnp.asarray(self.mj_model.actuator_ctrlrange[:3, 1])
        self.render_spec = render_lib.make_spec(
            self.mj_model, config.cameras, config.image_size, config.image_size
        )
        self.warp_renderer = None
        if config.obs_mode == "pixels" and config.render_backend == "warp":
            self.warp_renderer = render_lib.WarpRenderer(self.mj_model, self.render_spec, config.num_envs)

    # ---------------------------------------------------------------- properties
    @property
    def action_size(self) -> int:
        return 4

    @property
    def instructions(self) -> tuple[str, ...]:
        return self.task.instructions()

    @staticmethod
    def instruction(state: State) -> str | list[str]:
        """The instruction text(s) of an env or a batch of envs (host side)."""
        ep = jax.device_get(state.info["episode"])
        ids, tids = np.asarray(ep["instruction_id"]), np.asarray(ep["task_id"])
        text = lambda t, i: tasks.TASKS[int(t)].instructions()[int(i)]
        if ids.ndim == 0:
            return text(tids, ids)
        return [text(t, i) for t, i in zip(tids.reshape(-1), ids.reshape(-1))]

    # ---------------------------------------------------------------- reset / step
    def reset(self, rng: jax.Array, observe: bool = True, levels: jax.Array | None = None) -> State:
        return self.reset_task(rng, jnp.int32(self.task_id), observe, levels)

    @functools.partial(jax.named_call, name="tabletop_reset")  # a named scope: profiles attribute its ops
    def reset_task(self, rng: jax.Array, task_id: jax.Array, observe: bool = True,
                   levels: jax.Array | None = None) -> State:
        """Reset into task `task_id` (an index of `tasks.TASKS`; may be traced, so one compiled
        reset/step serves every task and a batch may mix tasks). `observe=False` leaves `obs` zero
        (no rendering; for callers that select among states and `observe` once).

        `levels` float32 `[perturb.NUM_AXES]` (may be traced; see `vlajax.envs.perturb`) perturbs the
        episode; without it the levels are drawn from `config.randomize` if set, else the episode
        is unperturbed (and `info["episode"]` has no `"perturb"` entry)."""
        p = None
        if levels is not None or self.config.randomize:
            k_pert = jax.random.fold_in(rng, perturb.PERTURB_STREAM)  # off the side: base draws unchanged
            if levels is None:
                lo, hi = perturb.range_arrays({a: (lo, hi) for a, lo, hi in self.config.randomize})
                levels = perturb.sample_levels(jax.random.fold_in(k_pert, 0), jnp.asarray(lo), jnp.asarray(hi))
            levels = jnp.broadcast_to(jnp.asarray(levels, jnp.float32), (perturb.NUM_AXES,))
            p = perturb.draw(jax.random.fold_in(k_pert, 1), levels, len(self.config.cameras), self.mj_model.ngeom)
        rng, k_layout, k_color, k_bright = jax.random.split(rng, 4)
        idx, m = self.idx, self.mj_model
        params = tasks.task_params(task_id)
        xy, yaw, zone, button = scene.sample_layout(k_layout, params["layout"], params["row_slots"])
        colors = scene.sample_colors(k_color, params["fixed_color"], params["same_color"])
        home = jnp.asarray(scene.HOME)
        if p is not None:
            xy, zone, button = perturb.shift_layout(p, xy, zone, button)
            home = perturb.robot_home(p)

        qpos = jnp.asarray(m.qpos0, jnp.float32)
        qpos = qpos.at[jnp.asarray(idx.gripper_qpos)].set(home)
        qpos = qpos.at[jnp.asarray(idx.finger_qpos)].set(scene.FINGER_OPEN)
        for i, adr in enumerate(idx.cube_qpos):
            pose = jnp.concatenate([xy[i], jnp.array([scene.CUBE_HALF]), scene.yaw_quat(yaw[i])])
            qpos = qpos.at[adr : adr + 7].set(pose)
        mocap = jnp.zeros((m.nmocap, 3))
        mocap = mocap.at[idx.zone_mocap, :2].set(zone).at[idx.button_mocap, :2].set(button)
        distractors = jnp.broadcast_to(jnp.asarray(scene.PARKED), (scene.NUM_DISTRACTORS, 3))
        if p is not None:
            distractors = perturb.place_distractors(p, xy, zone, button)
        mocap = mocap.at[jnp.asarray(idx.distractor_mocap)].set(distractors)
        ctrl = jnp.concatenate([home, jnp.full((1,), scene.FINGER_OPEN)])
        data = mjx.make_data(m, impl=self._mjx_impl)
        data = data.replace(qpos=qpos, ctrl=ctrl, mocap_pos=mocap)
        if self.c_physics is not None:  # C MuJoCo's poses (MJX leaves mocap children in place)
            data = self.c_physics.poses(data)
        elif self._mjx_impl == "jax":  # positions only: cheaper to compile than a full forward
            data = mjx.camlight(self.mjx_model, mjx.kinematics(self.mjx_model, data))
        else:
            data = mjx.forward(self.mjx_model, data)

        rgb = jnp.asarray([c for _, c in scene.PALETTE], jnp.float32)[colors]  # [4, 3]
        rgba = jnp.asarray(m.geom_rgba, jnp.float32)
        rgba = rgba.at[jnp.asarray([*idx.cube_geom, idx.zone_geom]), :3].set(rgb)
        lo, hi = self.config.brightness
        bright = jax.random.uniform(k_bright, (), minval=lo, maxval=hi)
        if p is not None:
            rgba, bright = perturb.recolor(p, rgba, idx.distractor_geom), perturb.brightness(p, bright)
        episode = {
            "colors": colors,
            "geom_rgba": rgba,
            "brightness": bright,
            "instruction_id": tasks.instruction_id(params, colors, 0 if p is None else p["paraphrase"]),
            "task_id": jnp.asarray(task_id, jnp.int32),
        }
        if p is not None:
            episode["perturb"] = p
        _, terms = self._evaluate(data, episode)
        metrics = {"success": jnp.float32(0.0), **{f"reward/{k}": jnp.float32(0.0) for k in terms}}
        info = {"rng": rng, "episode": episode}
        if observe:
            obs = self._obs(data, episode)
        else:
            obs = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(self._obs, data, episode))
        return State(data, obs, jnp.float32(0.0), jnp.float32(0.0), metrics, info)

    def step(self, state: State, action: jax.Array, observe: bool = True) -> State:
        """One control step. `observe=False` keeps the previous `obs` (skips rendering; callers such
        as `ActionChunkWrapper` call `observe` once at the end)."""
        self.check_action(action)
        a = jnp.clip(action.astype(jnp.float32), -1.0, 1.0)
        data = state.data
        ee = data.qpos[jnp.asarray(self.idx.gripper_qpos)]
        # Delta from the current end-effector position (robosuite-OSC style): no integrator windup.
        target = jnp.clip(ee + a[:3] * self.config.max_delta, self._ctrl_lo, self._ctrl_hi)
        finger = scene.FINGER_OPEN * (1.0 - a[3]) / 2.0
        data = data.replace(ctrl=jnp.concatenate([target, finger[None]]))
        if self.c_physics is not None:  # (C MuJoCo: one host model; the dynamics axis does not apply)
            data = self.c_physics.step(data)
        else:
            model = self.mjx_model
            if "perturb" in state.info["episode"] and self._mjx_impl == "jax":
                model = perturb.dynamics_model(state.info["episode"]["perturb"], model, self.idx)
            data = jax.lax.fori_loop(0, self.config.n_substeps, lambda _, d: mjx.step(model, d), data)

        success, terms = self._evaluate(data, state.info["episode"])
        scales = self.config.reward_scales
        scaled = {k: scales[k] * v for k, v in terms.items()}
        success = success.astype(jnp.float32)
        reward = scales["success"] * success + sum(scaled.values())
        unstable = jnp.any(~jnp.isfinite(data.qpos)) | jnp.any(~jnp.isfinite(data.qvel))
        done = jnp.maximum(success, unstable.astype(jnp.float32))
        # Keep metric keys the caller added (brax's training loop adds one), overwrite ours.
        metrics = {**state.metrics, "success": success, **{f"reward/{k}": v for k, v in scaled.items()}}
        obs = self._obs(data, state.info["episode"]) if observe else state.obs
        return state.replace(data=data, obs=obs, reward=reward, done=done, metrics=metrics)

    def observe(self, state: State) -> State:
        """Recompute `obs` (render the cameras) for `state`'s current physics."""
        return state.replace(obs=self._obs(state.data, state.info["episode"]))

    # ---------------------------------------------------------------- helpers
    def _parts(self, data: mjx.Data):
        idx = self.idx
        ee = data.qpos[jnp.asarray(idx.gripper_qpos)]
        fingers = data.qpos[jnp.asarray(idx.finger_qpos)]
        cubes = jnp.stack([data.qpos[a : a + 3] for a in idx.cube_qpos])
        zone = data.mocap_pos[idx.zone_mocap, :2]
        button = data.mocap_pos[idx.button_mocap, :2]
        return ee, fingers, cubes, zone, button, data.qpos[idx.button_qpos]

    def _evaluate(self, data: mjx.Data, episode):
        return tasks.evaluate(tasks.task_params(episode["task_id"]), *self._parts(data))

    def privileged_state(self, data: mjx.Data, episode) -> jax.Array:
        """Flat float32 `[32]`: proprio 8, cubes 9, zone xy 2, button xy 2 + depth 1, task one-hots 10."""
        _, _, cubes, zone, button, button_q = self._parts(data)
        params = tasks.task_params(episode["task_id"])
        onehots = jnp.concatenate([
            jax.nn.one_hot(params["target"], scene.NUM_CUBES),
            jax.nn.one_hot(params["ref"], scene.NUM_CUBES),
            jax.nn.one_hot(params["family"], len(tasks.FAMILIES)),
        ])
        parts = [self.proprio(data), cubes.reshape(-1), zone, button, button_q[None], onehots]
        return jnp.concatenate(parts).astype(jnp.float32)

    def proprio(self, data: mjx.Data) -> jax.Array:
        """float32 `[8]`: fingertip-centre xyz, finger joints l/r, end-effector velocity xyz."""
        idx = self.idx
        ee = data.qpos[jnp.asarray(idx.gripper_qpos)]
        return jnp.concatenate(
            [ee, data.qpos[jnp.asarray(idx.finger_qpos)], data.qvel[jnp.asarray(idx.gripper_qvel)]]
        ).astype(jnp.float32)

    @functools.partial(jax.named_call, name="tabletop_render")
    def render(self, data: mjx.Data, episode: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
        """One env's camera images `{camera: [H, W, 3] uint8}` with its episode colours and brightness
        (and its perturbation's camera poses and image noise, if any)."""
        p = episode.get("perturb")
        if p is not None:
            data = perturb.move_cameras(p, data, self.render_spec.cam_ids)
        if self.warp_renderer is not None:
            imgs = self.warp_renderer.render(self.mjx_model, data, episode["geom_rgba"])
        else:
            imgs = render_lib.render_jax(self.render_spec, data, episode["geom_rgba"])
        out = {k: render_lib.to_uint8(v, episode["brightness"]) for k, v in imgs.items()}
        if p is not None:
            out = {k: perturb.noisy_image(p, data, imgs[k] * episode["brightness"], v, i, render_lib.to_uint8)
                   for i, (k, v) in enumerate(out.items())}
        return out

    def _obs(self, data: mjx.Data, episode: Mapping[str, jax.Array]):
        if self.config.obs_mode == "state":
            return self.privileged_state(data, episode)
        obs = {image_key(k): v for k, v in self.render(data, episode).items()}
        if self.config.privileged_obs:
            obs["privileged"] = self.privileged_state(data, episode)
        proprio = self.proprio(data)
        if "perturb" in episode:
            proprio = perturb.noisy_state(episode["perturb"], data, proprio)
        return {"state": proprio, **obs, "instruction_id": episode["instruction_id"]}
