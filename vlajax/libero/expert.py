"""A scripted expert for `libero_spatial` (pick the named black bowl, place it on the plate) from the
object poses LIBERO exposes -- privileged state, not images. Runs inside the worker (numpy only).

The bowl is grasped by its rim wall: the gripper points down (as LIBERO starts it) with its fingers
closing along a horizontal axis `u` (world y unless the scene says otherwise), goes above the rim point
`RIM` m from the bowl's axis along `u` (or `-u`), descends so the wall lies between the open fingers,
closes, lifts, carries the bowl over the plate, lowers it and opens. Actions are OSC_POSE deltas in
the world frame: position error / 0.05 m (the controller's output scale), clipped to [-1, 1]; rotation
about world z only (toward the heading `yaw`, error / 0.5 rad), roll and pitch held by the controller.

Scene rules (`for_env`, from the LIBERO env the worker holds; each from a failure of the plain rule,
see docs/libero.md "LIBERO demonstrations"):

- of the two sides along `u`, the one where the hand's footprint (10.5 cm either way along `u`, 3.5 cm
  across; the palm is 4 cm above the fingertips) is clear of taller objects and fixtures (the cookie
  box, the cabinet): the palm landing on the cabinet's edge stopped the descent 20 cm above the bowl;
- the rim point is taken in the bowl's own frame and, when nothing decides above, on the higher side
  (a bowl resting tilted on the ramekin has one side 2 cm higher than the other);
- a bowl that starts inside a drawer (`(In bowl <cabinet>_top_region)`) is grasped across the
  drawer's width (`u` = the drawer's x axis, the hand turned about z to match) on the side with more
  room to its wall, higher on its wall, and lifted slowly: along the drawer's depth the front wall
  leaves 1.6 cm, too little for a finger, behind the bowl is the cabinet, and a fast lift lost the bowl;
- placing is closed-loop on the bowl's own position (LIBERO's `On(bowl, plate)` needs the centres
  within 3 cm in xy), and a grasp that did not lift the bowl, or lost it on the way, is retried from
  above (once).

Measured success rate: docs/libero.md.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SpatialExpert"]

RIM = 0.045  # m from the bowl's axis to the grasp point (its wall is at ~0.052)
ABOVE = 0.12  # approach height above the grasp point (m)
GRASP_H, GRASP_H_DRAWER = 0.025, 0.036  # eef height above the bowl's origin at the grasp (rim top ~0.052)
CARRY = 0.16  # lift: eef this far above where it grasped; the carry height
PLACE_DZ = 0.035  # lower until the bowl's origin is this far above the plate's, then open
LIFTED = 0.03  # the bowl rose at least this much during the lift: the grasp holds
OPEN, CLOSE = -1.0, 1.0
POS_SCALE, ROT_SCALE = 0.05, 0.5  # OSC_POSE output_max (m, rad per unit action)
HAND, HAND_W = 0.105, 0.035  # the hand's half-extent along the closing axis / across it (m)


def quat_to_mat(q: np.ndarray) -> np.ndarray:
    """Rotation matrix [3, 3] of a unit quaternion (x, y, z, w) [4] (robosuite's order)."""
    x, y, z, w = np.asarray(q, np.float64) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def rot_z(theta: float) -> np.ndarray:
    """Rotation [3, 3] by `theta` rad about world z."""
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def obstacle_boxes(env, exclude: tuple[str, ...] = ()) -> np.ndarray:
    """float [K, 5] (xmin, ymin, xmax, ymax, ztop), world: the bounding box of every collision geom of the
    LIBERO problem env's objects and fixtures (bodies named '<object>_...') but those named in `exclude`."""
    sim, m = env.sim, env.sim.model
    names = [n for n in (*env.objects_dict, *env.fixtures_dict) if n not in exclude]
    out = []
    for g in range(m.ngeom):
        body = m.body_id2name(m.geom_bodyid[g]) or ""
        if (m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0) or not any(
                body == n or body.startswith(n + "_") for n in names):
            continue
        pos, rot = sim.data.geom_xpos[g], sim.data.geom_xmat[g].reshape(3, 3)
        if m.geom_type[g] == 7:  # mesh: its vertices
            a, k = m.mesh_vertadr[m.geom_dataid[g]], m.mesh_vertnum[m.geom_dataid[g]]
            pts = m.mesh_vert[a:a + k] @ rot.T + pos
        elif m.geom_type[g] == 6:  # box: its corners
            corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], np.float64)
            pts = (corners * m.geom_size[g]) @ rot.T + pos
        else:  # anything else: its bounding sphere
            pts = np.stack([pos - m.geom_rbound[g], pos + m.geom_rbound[g]])
        lo, hi = pts.min(0), pts.max(0)
        out.append([lo[0], lo[1], hi[0], hi[1], hi[2]])
    return np.asarray(out, np.float64).reshape(-1, 5)


class SpatialExpert:
    """One episode's state machine; `act(obs)` -> float [7] each env step.

    bowl, plate: LIBERO object names (obs keys f'{name}_pos', f'{name}_quat'). yaw: the hand's turn about
    world z from LIBERO's start (pointing down, fingers closing along world y), rad: the fingers close along
    u = (-sin yaw, cos yaw, 0). side: +1 / -1 fixes the grasp side along u; 0 = the side whose hand footprint
    is clear of taller obstacles (`obstacles` [K, 5], `obstacle_boxes`), then the side whose rim is higher,
    then the side with more room from the other objects. grasp_h: eef height above the bowl's origin at the
    grasp (m). retries: grasps that did not lift the bowl tried again from above."""

    # (name, tolerance m, step budget)
    PHASES = (("above", 0.01, 70), ("down", 0.006, 50), ("close", None, 12), ("lift", 0.02, 40),
              ("over", 0.01, 90), ("lower", None, 50), ("release", None, 8), ("rise", None, 10_000))

    def __init__(self, bowl: str, plate: str, yaw: float = 0.0, side: int = 0, grasp_h: float = GRASP_H,
                 retries: int = 1, obstacles: np.ndarray | None = None):
        self.bowl, self.plate = bowl, plate
        self.obstacles = np.zeros((0, 5)) if obstacles is None else np.asarray(obstacles, np.float64)
        self.yaw, self.side, self.grasp_h, self.retries = yaw, side, grasp_h, retries
        self.u = rot_z(yaw) @ np.array([0.0, 1.0, 0.0])  # the fingers' closing axis in the world
        self.phase, self.n = 0, 0
        self.target: np.ndarray | None = None
        self.grasp_off: np.ndarray | None = None  # grasp point - bowl origin (world), fixed at 'above'
        self.bowl_z0 = 0.0

    @classmethod
    def for_env(cls, env) -> SpatialExpert:
        """The expert for a LIBERO env (`OffScreenRenderEnv` / `ControlEnv` after `set_init_state`):
        its objects of interest, and the drawer rule when the bowl starts inside a cabinet's drawer."""
        bowl, plate = env.obj_of_interest[:2]
        inner = getattr(env, "env", env)
        for pred in inner.parsed_problem.get("initial_state", []):
            if len(pred) == 3 and pred[0].lower() == "in" and pred[1] == bowl and "cabinet" in pred[2]:
                region = pred[2][: pred[2].rindex("_region")]  # e.g. wooden_cabinet_1_top
                fixture, part = region.rsplit("_", 1)
                body = f"{fixture}_cabinet_{part}"  # the drawer's body (it moves with the drawer)
                sim = inner.sim
                bid = sim.model.body_name2id(body)  # (the cabinet's pose is drawn at reset, not in the init state)
                r = sim.data.body_xmat[bid].reshape(3, 3)
                dx = r[:, 0]  # the drawer's width axis in the world
                yaw = math.atan2(dx[1], dx[0]) - math.pi / 2  # turn world y onto the drawer's x axis
                yaw = (yaw + math.pi / 2) % math.pi - math.pi / 2  # the closing axis has no sign: |yaw| <= 90 deg
                u = rot_z(yaw) @ np.array([0.0, 1.0, 0.0])
                local_x = float(r[:, 0] @ (sim.data.body_xpos[inner.obj_body_id[bowl]] - sim.data.body_xpos[bid]))
                toward = -np.sign(local_x) or -1.0  # the side with more room to its wall (the walls: x = +-0.1)
                side = 1 if float(u @ (toward * dx)) > 0 else -1
                return cls(bowl, plate, yaw=yaw, side=side, grasp_h=GRASP_H_DRAWER)
        return cls(bowl, plate, obstacles=obstacle_boxes(inner, exclude=(bowl, "main_table")))

    def _next(self) -> None:
        self.phase, self.n, self.target = self.phase + 1, 0, None

    def _grasp_offset(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """World offset of the grasp point from the bowl's origin: the rim point along +-u in the bowl's
        frame at the grasp height (the higher side, or `side`)."""
        rb = quat_to_mat(obs[f"{self.bowl}_quat"])
        cands = []
        for s in (1.0, -1.0):
            d = rb.T @ (s * self.u)
            d[2] = 0.0
            d /= np.linalg.norm(d)
            cands.append((s, rb @ (RIM * d + np.array([0.0, 0.0, self.grasp_h]))))
        if self.side:
            return next(off for s, off in cands if s == self.side)
        (s1, o1), (s2, o2) = cands
        bowl = np.asarray(obs[f"{self.bowl}_pos"])
        h1, h2 = (self.clearance(bowl + o) for o in (o1, o2))
        if abs(h1 - h2) > 0.01:  # something taller under one side's hand (a box, the cabinet): the other side
            return o1 if h1 < h2 else o2
        if abs(o1[2] - o2[2]) > 0.004:  # tilted: the higher rim
            return o1 if o1[2] > o2[2] else o2
        others = [np.asarray(v)[:2] for k, v in obs.items() if k.endswith("_pos") and not k.startswith("robot")
                  and "_to_" not in k and k not in (f"{self.bowl}_pos", f"{self.plate}_pos")]

        def room(off):
            p = (bowl + off)[:2]
            return min((np.linalg.norm(p - o) for o in others if np.linalg.norm(o - bowl[:2]) > 0.02), default=1.0)

        return o1 if room(o1) >= room(o2) else o2

    def clearance(self, grasp: np.ndarray) -> float:
        """The highest obstacle top (m, world z; -inf: none) under the hand's footprint with the grasp point
        `grasp` [3] between the fingers: `HAND` m either way along the closing axis, `HAND_W` across."""
        if not len(self.obstacles):
            return -math.inf
        v = np.array([-self.u[1], self.u[0]])
        s, t = np.meshgrid(np.linspace(-HAND, HAND, 15), np.linspace(-HAND_W, HAND_W, 3))
        pts = grasp[:2] + s.reshape(-1, 1) * self.u[:2] + t.reshape(-1, 1) * v  # [45, 2]
        b = self.obstacles
        inside = ((pts[:, None, 0] >= b[None, :, 0]) & (pts[:, None, 0] <= b[None, :, 2]) &
                  (pts[:, None, 1] >= b[None, :, 1]) & (pts[:, None, 1] <= b[None, :, 3]))  # [45, K]
        hit = inside.any(0)
        return float(b[hit, 4].max()) if hit.any() else -math.inf

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        name, tol, budget = self.PHASES[self.phase]
        eef = np.asarray(obs["robot0_eef_pos"], np.float64)
        bowl = np.asarray(obs[f"{self.bowl}_pos"], np.float64)
        plate = np.asarray(obs[f"{self.plate}_pos"], np.float64)
        if self.target is None:  # the phase's goal, fixed when it starts
            if name == "above":
                self.grasp_off = self._grasp_offset(obs)
                self.bowl_z0 = float(bowl[2])
            if name == "above":
                self.target = bowl + self.grasp_off + [0, 0, ABOVE]
            elif name == "down":
                self.target = bowl + self.grasp_off
            elif name == "lift":
                self.target = eef + [0, 0, CARRY]
            else:
                self.target = eef
        grip = CLOSE if name in ("close", "lift", "over", "lower") else OPEN
        if name == "over":  # closed loop on the bowl: its centre over the plate's, at the carry height
            goal = eef + np.append(plate[:2] - bowl[:2], self.target[2] - eef[2])
        elif name == "lower":
            goal = eef + np.append(plate[:2] - bowl[:2], plate[2] + PLACE_DZ - bowl[2])
        else:
            goal = self.target
        if name == "lift" and self.n >= 8 and bowl[2] - self.bowl_z0 < LIFTED / 3 and eef[2] - bowl[2] > 0.1:
            return self._retry(obs)  # the bowl stayed behind: open and grasp again
        if name in ("over", "lower") and np.linalg.norm(eef - bowl - self.grasp_off) > 0.06:
            return self._retry(obs)  # the bowl slipped out on the way: back for it (the loop would chase the plate)
        if tol is not None and np.linalg.norm(goal - eef) < tol:
            if name == "lift" and bowl[2] - self.bowl_z0 < LIFTED:
                return self._retry(obs)
            self._next()
            return self.act(obs)
        if name == "lower" and (bowl[2] - plate[2] < PLACE_DZ + 0.005 and np.linalg.norm(goal[:2] - eef[:2]) < 0.01):
            self._next()
            return self.act(obs)
        if name in ("close", "release"):
            move = np.zeros(3)
        elif name == "rise":
            move = np.array([0.0, 0.0, 0.5])
        else:
            near = name in ("down", "lower") and abs(goal[2] - eef[2]) < 0.05
            limit = 0.5 if near else 1.0  # slower near contact: less overshoot
            if name == "lift" and self.grasp_h == GRASP_H_DRAWER:
                limit = 0.3  # out of the drawer slowly: a fast lift lost the bowl against the cabinet
            move = np.clip((goal - eef) / POS_SCALE, -limit, limit)
        rot = self._turn(obs)
        if name in ("close", "release"):
            rot = np.zeros(3)
        self.n += 1
        if self.n >= budget and self.phase + 1 < len(self.PHASES):  # out of steps: on to the next phase
            self._next()
        return np.concatenate([move, rot, [grip]])

    def _turn(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """The rotation action [3]: about world z only, toward the heading `yaw` (the hand's x axis). Roll
        and pitch are left to the controller, which holds them: correcting LIBERO's ~3 degree start tilt
        as well stalls the arm's reach over the far plate (a steady state short of the goal)."""
        x = quat_to_mat(obs["robot0_eef_quat"])[:, 0]
        err = (self.yaw - math.atan2(x[1], x[0]) + math.pi) % (2 * math.pi) - math.pi
        return np.array([0.0, 0.0, float(np.clip(err / ROT_SCALE, -1.0, 1.0))])

    def _retry(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        if self.retries <= 0:
            self._next()
            return self.act(obs)
        self.retries -= 1
        self.phase, self.n, self.target = 0, 0, None
        return self.act(obs)
