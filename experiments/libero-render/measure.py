"""Render LIBERO's two cameras at the policy's size vs at 256 and resized: cost per frame and pixels.

Run in LIBERO's venv (numpy, PIL, libero; `vlajax.libero.protocol` for openpi's conversion):

    MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONPATH=. .venv-libero/bin/python \\
        experiments/libero-render/measure.py --size 64 --frames 40 --out results/libero-render

One LIBERO env (libero_spatial task 0, initial state 0, seed 7) steps a fixed random action sequence;
at every frame both paths render both cameras (agentview, robot0_eye_in_hand) from the SAME physics
state with robosuite's `sim.render` (the call its camera observables make), paired, in alternating
order (so neither path always runs first):

    native    render at size x size, rotate 180 degrees (what the worker does at camera_size = size)
    resized   render at 256 x 256, rotate, resize with pad to size (openpi's LIBERO example:
              `vlajax.libero.protocol.convert_image`, PIL bilinear)

Each path's wall time per frame (both cameras) is recorded; the pixels are compared per frame
(mean and max absolute difference of uint8 values, per camera). Writes `<out>/render.json`
(per-frame times, medians, paired ratio, load average, versions) and `<out>/side_by_side.png`
(per camera: native | resized | 4 x |difference|, upscaled 4 x nearest, from the last frame).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import time

import numpy as np
import tyro

from vlajax.libero.protocol import convert_image

CAMERAS = ("agentview", "robot0_eye_in_hand")


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    size: int = 64  # the policy's image size (rendered natively)
    base: int = 256  # the render size of the resized path (openpi's 256)
    frames: int = 40  # frames rendered by each path
    suite: str = "libero_spatial"  # the LIBERO suite
    task: int = 0  # the task index within the suite
    out: str = "results/libero-render"  # folder of render.json and side_by_side.png


def main() -> None:
    a = tyro.cli(Args, description=__doc__.splitlines()[0])

    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv
    from PIL import Image

    suite = benchmark.get_benchmark_dict()[a.suite]()
    task = suite.get_task(a.task)
    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    t0 = time.perf_counter()
    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=a.base, camera_widths=a.base)
    build_s = time.perf_counter() - t0
    env.seed(7)
    env.reset()
    env.set_init_state(suite.get_task_init_states(a.task)[0])
    sim = env.env.sim

    def native():
        return [np.ascontiguousarray(sim.render(camera_name=c, width=a.size, height=a.size)[::-1, ::-1])
                for c in CAMERAS]

    def resized():
        return [convert_image(sim.render(camera_name=c, width=a.base, height=a.base), a.size) for c in CAMERAS]

    rng = np.random.default_rng(0)
    rows = []
    for f in range(a.frames + 3):  # the first 3 frames warm both paths' buffers (not kept)
        act = np.concatenate([rng.uniform(-0.3, 0.3, 6), [-1.0 if f % 20 < 10 else 1.0]])
        env.step(act)
        order = (native, resized) if f % 2 == 0 else (resized, native)
        got, secs = {}, {}
        for fn in order:
            s = time.perf_counter()
            got[fn.__name__] = fn()
            secs[fn.__name__] = time.perf_counter() - s
        if f < 3:
            continue
        diff = [np.abs(n.astype(np.int16) - r.astype(np.int16)) for n, r in zip(got["native"], got["resized"])]
        rows.append({"frame": f - 3, "native_ms": 1e3 * secs["native"], "resized_ms": 1e3 * secs["resized"],
                     **{f"mad_{c}": float(d.mean()) for c, d in zip(CAMERAS, diff)},
                     **{f"max_{c}": int(d.max()) for c, d in zip(CAMERAS, diff)}})
    env.close()

    med = {k: statistics.median(r[k] for r in rows) for k in ("native_ms", "resized_ms")}
    ratios = sorted(r["resized_ms"] / r["native_ms"] for r in rows)
    summary = {
        "suite": a.suite, "task": a.task, "size": a.size, "base": a.base, "frames": len(rows),
        "native_ms_median": med["native_ms"], "resized_ms_median": med["resized_ms"],
        "resized_over_native_median": statistics.median(ratios),
        "resized_over_native_q10_q90": [ratios[len(ratios) // 10], ratios[(9 * len(ratios)) // 10]],
        **{f"mad_{c}_mean": statistics.fmean(r[f"mad_{c}"] for r in rows) for c in CAMERAS},
        **{f"max_{c}": max(r[f"max_{c}"] for r in rows) for c in CAMERAS},
        "env_build_s": build_s, "loadavg": os.getloadavg(), "gl": os.environ.get("MUJOCO_GL", ""),
        "python": platform.python_version(), "host_cpus": os.cpu_count(),
        "what": "both cameras per frame, the same physics state for both paths (sim.render), real LIBERO render",
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "render.json"), "w") as fh:
        json.dump({"summary": summary, "frames": rows}, fh, indent=1)
    tiles = []
    for n, r in zip(got["native"], got["resized"]):
        d = np.clip(4 * np.abs(n.astype(np.int16) - r.astype(np.int16)), 0, 255).astype(np.uint8)
        tiles.append(np.concatenate([n, r, d], axis=1))
    img = np.concatenate(tiles, axis=0)
    Image.fromarray(img).resize((img.shape[1] * 4, img.shape[0] * 4), Image.Resampling.NEAREST).save(
        os.path.join(a.out, "side_by_side.png"))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
