"""Render cost of one LIBERO scene under MuJoCo's visual quality settings (a probe, one sample per setting).

Run in LIBERO's venv (numpy, libero; `vlajax.shared.atomic_files` for the JSON):

    MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONPATH=. .venv-libero/bin/python \\
        experiments/libero-render/quality_probe.py --size 64 --renders 40 \\
        --json results/libero-render/quality_probe.json

Builds libero_spatial task 0 at initial state 0 as the worker does (robosuite's OffScreenRenderEnv, both cameras at
size x size), steps 5 zero actions, then times rendering both cameras (agentview, robot0_eye_in_hand) from that one
physics state:

    robosuite   `sim.render` (the call the worker's camera observables make), the model's own quality settings
    renderer    `mujoco.Renderer(model, size, size)`, a fresh GL context per setting, for the model's
                `vis.quality.shadowsize` / `offsamples` (multisample anti-aliasing) and cheaper values

MuJoCo reads the quality settings when a GL context is made, so only the `renderer` rows can vary them. Each row:
seconds per two-camera render (mean over `renders`) and the mean / max absolute uint8 difference of its two images
against the `renderer` row at the model's defaults. Writes JSON (rows, load average, versions) to `--json`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import numpy as np
import tyro

from vlajax.shared.atomic_files import write_json

CAMERAS = ("agentview", "robot0_eye_in_hand")


@dataclasses.dataclass(frozen=True)
class Args:
    size: int = 64
    """camera height and width in pixels"""
    renders: int = 40
    """two-camera renders timed per setting"""
    json: str = "results/libero-render/quality_probe.json"
    """where the JSON goes (written whole, then renamed)"""


def _timed(render_two, n: int) -> tuple[float, np.ndarray]:
    """render_two() -> uint8 [2, H, W, 3]; returns (seconds per call, the first call's images)."""
    first = render_two()
    t0 = time.perf_counter()
    for _ in range(n):
        render_two()
    return (time.perf_counter() - t0) / n, first


def main(args: Args) -> None:
    if args.size < 8 or args.renders < 1:
        raise SystemExit("error: --size must be >= 8 and --renders >= 1")
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    import mujoco
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    suite = benchmark.get_benchmark_dict()["libero_spatial"]()
    task = suite.get_task(0)
    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=args.size, camera_widths=args.size)
    env.reset()
    env.set_init_state(suite.get_task_init_states(0)[0])
    for _ in range(5):
        env.step([0.0] * 7)
    m, d = env.sim.model._model, env.sim.data._data
    defaults = (int(m.vis.quality.shadowsize), int(m.vis.quality.offsamples))

    def robosuite_two():
        return np.stack([env.sim.render(camera_name=c, height=args.size, width=args.size) for c in CAMERAS])

    rows = []
    sec, _ = _timed(robosuite_two, args.renders)
    rows.append({"path": "robosuite", "shadowsize": defaults[0], "offsamples": defaults[1], "s_per_2cam_render": sec})
    ref = None
    for shadow, samples in [defaults, (1024, defaults[1]), (defaults[0], 0), (1024, 0), (256, 0)]:
        m.vis.quality.shadowsize, m.vis.quality.offsamples = shadow, samples
        renderer = mujoco.Renderer(m, args.size, args.size)

        def renderer_two(renderer=renderer):
            out = []
            for c in CAMERAS:
                renderer.update_scene(d, camera=c)
                out.append(renderer.render().copy())
            return np.stack(out)

        sec, imgs = _timed(renderer_two, args.renders)
        renderer.close()
        imgs = imgs.astype(np.int16)
        ref = imgs if ref is None else ref
        diff = np.abs(imgs - ref)
        rows.append(
            {
                "path": "renderer",
                "shadowsize": int(shadow),
                "offsamples": int(samples),
                "s_per_2cam_render": sec,
                "px_mean_abs_diff": float(diff.mean()),
                "px_max_abs_diff": int(diff.max()),
            }
        )
    m.vis.quality.shadowsize, m.vis.quality.offsamples = defaults
    out = {
        "size": args.size,
        "renders": args.renders,
        "cameras": list(CAMERAS),
        "defaults": list(defaults),
        "rows": rows,
        "load": list(os.getloadavg()),
        "mujoco": mujoco.__version__,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    write_json(args.json, out)
    print(json.dumps(out, indent=1))
    env.close()


if __name__ == "__main__":
    main(tyro.cli(Args))
