"""A scripted expert for `libero_spatial` (pick the named black bowl, place it on the plate) from the
object poses LIBERO exposes -- privileged state, not images. Runs inside the worker (numpy only).

The bowl is grasped by its rim: the gripper, pointing down as LIBERO starts it, goes above a point
`RIM` m from the bowl's centre along world y (the fingers close along y, so the rim wall lies between
them), descends, closes, lifts, moves over the plate, lowers, opens and rises. Actions are OSC_POSE
deltas: position error / 0.05 m (the controller's output scale), clipped to [-1, 1]; no rotation.
Measured success rate: docs/libero.md.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SpatialExpert"]

RIM = 0.045  # m from the bowl's centre to the grasp point, along world y
ABOVE, GRASP_Z, CARRY, PLACE_Z = 0.12, 0.02, 0.15, 0.05  # heights above the bowl / plate origin (m)
OPEN, CLOSE = -1.0, 1.0


class SpatialExpert:
    """One episode's state machine; `act(obs)` -> float [7] each env step."""

    # (name, tolerance m, step budget)
    PHASES = (("above", 0.008, 80), ("down", 0.005, 80), ("close", None, 12), ("lift", 0.008, 60),
              ("over", 0.008, 100), ("lower", 0.01, 60), ("release", None, 10), ("rise", None, 10_000))

    def __init__(self, bowl: str, plate: str):
        self.bowl, self.plate = bowl, plate
        self.phase, self.n = 0, 0
        self.target: np.ndarray | None = None
        self.off = np.array([0.0, RIM, 0.0])

    def _next(self) -> None:
        self.phase, self.n, self.target = self.phase + 1, 0, None

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        name, tol, budget = self.PHASES[self.phase]
        eef = np.asarray(obs["robot0_eef_pos"], np.float64)
        if self.target is None:  # the phase's goal, fixed when it starts
            bowl, plate = obs[f"{self.bowl}_pos"], obs[f"{self.plate}_pos"]
            self.target = {"above": bowl + self.off + [0, 0, ABOVE], "down": bowl + self.off + [0, 0, GRASP_Z],
                           "lift": eef + [0, 0, CARRY], "over": plate + self.off + [0, 0, CARRY],
                           "lower": plate + self.off + [0, 0, PLACE_Z]}.get(name, eef)
        grip = CLOSE if name in ("close", "lift", "over", "lower") else OPEN
        if tol is not None and np.linalg.norm(self.target - eef) < tol:
            self._next()
            return self.act(obs)
        if name in ("close", "release"):
            move = np.zeros(3)
        elif name == "rise":
            move = np.array([0.0, 0.0, 0.5])
        else:
            move = np.clip((self.target - eef) / 0.05, -1.0, 1.0)
        self.n += 1
        if self.n >= budget and self.phase + 1 < len(self.PHASES):  # out of steps: on to the next phase
            self._next()
        return np.concatenate([move, np.zeros(3), [grip]])
