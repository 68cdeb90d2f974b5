"""C MuJoCo physics for the tabletop tasks (`physics_impl="c"`): the LIBERO-style CPU simulator.

LIBERO-style simulators step C MuJoCo on CPU worker threads, off the accelerator. With
`TabletopConfig(physics_impl="c")` the physics of one control step (`n_substeps` steps of the
same scene) runs in C MuJoCo through `jax.pure_callback`; everything else — action to ctrl,
reward, success, observation, the wrappers, auto-reset — is the same JAX code as with MJX, so
the same tasks run on either simulator inside the same jitted rollout.

The callback steps the envs of a batch in native code: a `mujoco.batch.Batch` (one per
concurrent caller and batch size, from a pool) holds one state row per env; the callback writes
the rows from the packed inputs (a few vectorized copies), steps every env in C on the calling
thread without Python's GIL (`Batch.step`), and reads the outputs back as arrays. No Python runs
per env, so env slots stepping in their own threads (`vlajax.pipeline.slots`) are C MuJoCo worker
threads, and the other lanes of the async loop (inference, training) keep the GIL meanwhile.
The results are bit-identical to stepping each env on one `MjData` with `mj_step` (the batch's
contract; `tests/envs/test_c_physics.py` checks it against that loop).

Per env, the callback reads `time, qpos, qvel, act, qacc_warmstart` (the solver's warm start,
so consecutive control steps are one continuous C simulation) plus the inputs `ctrl,
mocap_pos, mocap_quat`, steps, then recomputes the positional fields at the new state (the
batch's `mjSTAGE_POS`, which includes `mj_kinematics` and `mj_camlight`: body/geom/site/camera
poses, what rendering reads). Velocity- and
force-dependent fields of `mjx.Data` (`qacc`, `cvel`, `qfrc_*`, ...) are not updated: nothing
in the tabletop tasks reads them.

Numerics: C MuJoCo steps in float64 (MJX in float32) with its own solver code, so a C
trajectory follows the MJX one closely but not bit for bit (tests/envs/test_c_physics.py).
The callback runs on the host: use it for single-device CPU rollouts (the CPU-bound regime of
the async benchmark, CPU-only runs); a rollout sharded over several devices should use MJX.

Host timing (`host_timing()`, off by default; `python -m vlajax.bench async` uses it): while the
context is open every physics call (not the pose-only resets) records its wall time (with
`per_env=True` also each env's control step: the batch then steps env after env, one native
call each, so only a calibration run should ask for it), and with `farm(n) -> seconds` a call
over n envs also takes that wall time (it sleeps what its real steps left): a remote worker
farm emulated around the in-process simulator, with the emulated sleeps kept as intervals so a
caller can say which share of its wall time was emulated. The loops and the jitted rollout are unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import mujoco
import mujoco.batch
import numpy as np
from mujoco import mjx

__all__ = ["CPhysics", "HostTiming", "host_timing"]


@dataclasses.dataclass
class HostTiming:
    """What the callbacks did while `host_timing` was open (see the module docstring).

    env_step_s: real seconds of each env's control step (recorded with `per_env` only);
    calls: physics calls; real_s: their real seconds; sleeps: `(start, end)` monotonic
    intervals of the emulated remainder (farm only)."""

    farm: Callable[[int], float] | None = None
    per_env: bool = False
    env_step_s: list[float] = dataclasses.field(default_factory=list)
    calls: int = 0
    real_s: float = 0.0
    sleeps: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)


_timing: HostTiming | None = None  # read by every callback at run time (XLA threads: not thread-local)


@contextlib.contextmanager
def host_timing(farm: Callable[[int], float] | None = None, per_env: bool = False) -> Iterator[HostTiming]:
    """Record (and with `farm`, emulate) the C MuJoCo step times of every `CPhysics` while open;
    `per_env`: also each env's own step time (the envs are then stepped one native call each)."""
    global _timing
    if _timing is not None:
        raise RuntimeError("host_timing is already open")
    _timing = HostTiming(farm, per_env)
    try:
        yield _timing
    finally:
        _timing = None

STATE_FIELDS = ("time", "qpos", "qvel", "act", "qacc_warmstart")  # carried per env
INPUT_FIELDS = ("ctrl", "mocap_pos", "mocap_quat")  # set by the env, not changed by physics
POSE_FIELDS = ("xpos", "xquat", "xmat", "xipos", "ximat", "xanchor", "xaxis", "geom_xpos", "geom_xmat",
               "site_xpos", "site_xmat", "cam_xpos", "cam_xmat")  # recomputed after the step


class CPhysics:
    """`step(data) -> data`: `n_substeps` C MuJoCo steps of `model` for an `mjx.Data` (any batch shape)."""

    def __init__(self, model: mujoco.MjModel, n_substeps: int):
        if n_substeps < 1:
            raise ValueError(f"n_substeps must be >= 1, got {n_substeps}")
        self.model, self.n_substeps = model, n_substeps
        # Batch pools by batch size, one batch per concurrent caller. Not threading.local: XLA runs the
        # callback on its own threads under a temporary Python thread state whose locals die with each call.
        self._pool: dict[int, queue.SimpleQueue[_Batch]] = {}

    @staticmethod
    def layout(data: mjx.Data) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
        """(inputs, outputs): the non-empty fields of `STATE_FIELDS + INPUT_FIELDS` and of
        `STATE_FIELDS + POSE_FIELDS` with their per-env shapes, in packing order (`act` is `[0]`
        without activation states and stays out)."""
        present = lambda ks: {k: getattr(data, k).shape for k in ks if getattr(data, k).size}
        return present(STATE_FIELDS + INPUT_FIELDS), present(STATE_FIELDS + POSE_FIELDS)

    def _batch(self, n: int) -> _Batch:
        """A pooled batch of `n` envs (made on first use)."""
        pool = self._pool.get(n)
        if pool is None:
            pool = self._pool.setdefault(n, queue.SimpleQueue())  # atomic: one queue per size
        try:
            return pool.get_nowait()
        except queue.Empty:
            return _Batch(self.model, n)

    def _simulate(self, flat: np.ndarray, inputs: dict[str, tuple[int, ...]], cuts: np.ndarray,
                  outputs: dict[str, tuple[int, ...]], nstep: int) -> np.ndarray:
        """`flat` `[N, sum of input sizes]` rows (split at `cuts`) -> `[N, sum of output sizes]` rows:
        the N envs stepped `nstep` times in C on a pooled batch (0: poses only)."""
        n = flat.shape[0]
        bt = self._batch(n)
        try:
            for k, part in zip(inputs, np.split(flat, cuts, axis=1)):
                view = bt.field(k)
                view[...] = part.reshape(view.shape)  # float32 -> the rows' float64, as MjData's fields
            out = [bt.field(k) for k in outputs]  # bound before the call: a field bound after it reads zeros
            timing = _timing if nstep else None
            if timing is not None and timing.per_env:
                per_env = []
                for i in range(n):
                    t0 = time.perf_counter()
                    bt.batch.step(np.asarray([i], np.int32), nstep=nstep, stage=_POSES)
                    per_env.append(time.perf_counter() - t0)
                with timing.lock:
                    timing.env_step_s.extend(per_env)
            elif nstep:
                bt.batch.step(nstep=nstep, stage=_POSES)  # native, without the GIL
            else:
                bt.batch.forward(stage=_POSES)
            return np.concatenate([v.reshape(n, -1) for v in out], axis=1).astype(flat.dtype)
        finally:
            self._pool[n].put(bt)

    def step_host(self, inputs: dict[str, tuple[int, ...]], outputs: dict[str, tuple[int, ...]],
                  packed: np.ndarray, nstep: int | None = None) -> np.ndarray:
        """Host side: `packed` `[*batch, sum of input sizes]` holds the `inputs` fields (`layout`'s,
        in order) -> `[*batch, sum of output sizes]` with the `outputs` fields, same dtype.
        `nstep` physics steps (default `n_substeps`; 0: poses only)."""
        packed = np.asarray(packed)
        sizes = [_size(shape) for shape in inputs.values()]
        if sum(sizes) != packed.shape[-1]:
            raise ValueError(f"packed input has {packed.shape[-1]} values per env, fields {inputs} need {sum(sizes)}")
        nstep = self.n_substeps if nstep is None else nstep
        width = sum(_size(shape) for shape in outputs.values())
        flat = packed.reshape(-1, packed.shape[-1])
        timing, t0 = _timing, time.monotonic()
        out = self._simulate(flat, inputs, np.cumsum(sizes)[:-1], outputs, nstep)
        if timing is not None and nstep:
            real = time.monotonic() - t0
            left = timing.farm(flat.shape[0]) - real if timing.farm is not None else 0.0
            if left > 0:
                s0 = time.monotonic()
                time.sleep(left)  # releases the GIL and the core, like waiting on remote workers
            with timing.lock:
                timing.calls += 1
                timing.real_s += real
                if left > 0:
                    timing.sleeps.append((s0, time.monotonic()))
        return out.reshape(*packed.shape[:-1], width)

    def step(self, data: mjx.Data) -> mjx.Data:
        """`data` (one env, or a batch under `vmap`) after `n_substeps` C MuJoCo steps with its `ctrl`."""
        return self._call(data, self.n_substeps)

    def poses(self, data: mjx.Data) -> mjx.Data:
        """`data` with its positional fields from C MuJoCo's `mj_kinematics` + `mj_camlight` (no step;
        for resets, so a first observation places bodies as the C simulation will)."""
        return self._call(data, 0)

    def _call(self, data: mjx.Data, nstep: int) -> mjx.Data:
        inputs, outputs = self.layout(data)
        dtype = data.qpos.dtype
        packed = jnp.concatenate([jnp.ravel(getattr(data, k)).astype(dtype) for k in inputs])
        sizes = [_size(shape) for shape in outputs.values()]
        new = jax.pure_callback(functools.partial(self.step_host, inputs, outputs, nstep=nstep),
                                jax.ShapeDtypeStruct((sum(sizes),), dtype), packed, vmap_method="expand_dims")
        parts = jnp.split(new, np.cumsum(sizes)[:-1])
        return data.replace(**{k: p.reshape(shape).astype(getattr(data, k).dtype)
                               for (k, shape), p in zip(outputs.items(), parts)})


_POSES = mujoco.mjtStage.mjSTAGE_POS.value  # after the step: positions (incl. kinematics, camlight) at the new state


class _Batch:
    """A `mujoco.batch.Batch` of n envs (stepped on the calling thread) and its bound fields: state
    fields are live views of its rows, the others are copied out after every call."""

    def __init__(self, model: mujoco.MjModel, n: int):
        self.batch = mujoco.batch.Batch(model, n, nthread=1)
        self.batch.reset(stage=mujoco.mjtStage.mjSTAGE_NONE.value)  # the model's defaults, as a new MjData
        self._fields: dict[str, np.ndarray] = {}

    def field(self, name: str) -> np.ndarray:
        """`[n, *field shape]`: bound on first use, then refreshed by every call (a derived field
        reads zeros until the first call after its binding)."""
        view = self._fields.get(name)
        if view is None:
            view = self._fields[name] = self.batch.bind(name)
        return view


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))
