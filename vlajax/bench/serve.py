"""`python -m vlajax.bench serve --clients 1 4 16 64 --json docs/bench/serve.json`.

Serving throughput and latency with cross-client batching. One `python -m vlajax.serve`
subprocess serves the policy (default: the `sft-small` preset's model, initialized and saved
as an SFT checkpoint -- weights do not change the cost of a forward pass; `--checkpoint DIR`
serves a trained one). For each client count C, C websocket connections in this process each
run closed-loop (send an observation, wait for its actions, send the next) for `--seconds`
after `--warmup-s`; per C: requests/s, latency p50 / p95 / p99 (ms, client-side, round trip)
and the mean batch size the server fired. The targets of issue 19 are computed and reported,
not tuned for: 16 clients >= 6x the requests/s of 1 client; p95 at 16 clients <= 3x the
single-client p50. The machine load (`/proc/loadavg`) before and after is recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from vlajax import cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_init_checkpoint(directory: str, cfg, *, seed: int = 0) -> str:
    """An SFT-layout checkpoint (config.json, policy.json, step 0) of `cfg`'s freshly initialized
    model, with unit normalization statistics. -> `directory`."""
    import jax

    from vlajax import checkpoint, run_files
    from vlajax.data.normalize import NormStats
    from vlajax.policy import Bridge

    cameras = tuple(sorted(cfg.env.cameras))

    def stats(d):
        z, o = np.zeros(d, np.float32), np.ones(d, np.float32)
        return NormStats(mean=z, std=o, q01=-o, q99=o)

    bridge = Bridge(cfg.model, cameras, {"actions": stats(cfg.model.action_dim), "state": stats(8)},
                    env_action_dim=min(cfg.model.action_dim, 4))
    state = jax.jit(run_files.init_fn(cfg, cameras))(jax.random.key(seed))
    state = jax.tree.map(lambda x: x.value if hasattr(x, "value") else x, state, is_leaf=lambda x: hasattr(x, "value"))
    os.makedirs(directory, exist_ok=True)
    run_files.write_json(os.path.join(directory, run_files.CONFIG_FILE), run_files.config_to_dict(cfg))
    bridge.save(directory)
    with checkpoint.Checkpointer(directory, async_save=False) as ckpt:
        ckpt.save(0, state, extra={"step": 0, "config": cfg.name}, force=True)
    return directory


def _loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def _example(meta: dict[str, Any], seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    obs: dict[str, Any] = {}
    for key, e in meta["observation"].items():
        if e["dtype"] == "str":
            obs[key] = "put the red cube in the bowl"
        elif e["dtype"] == "uint8":
            obs[key] = rng.integers(0, 256, tuple(e["shape"]), dtype=np.uint8)
        else:
            obs[key] = rng.standard_normal(tuple(e["shape"])).astype(np.float32)
    return obs


async def _measure(url: str, clients: int, warmup_s: float, seconds: float) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    from vlajax.serve.codec import pack, unpack

    conns = [await connect(url, compression=None, max_size=None, open_timeout=60) for _ in range(clients)]
    metas = [unpack(await ws.recv()) for ws in conns]
    t_start = time.monotonic() + warmup_s
    t_end = t_start + seconds
    lat: list[float] = []
    batch: list[int] = []
    errors: list[str] = []

    async def lane(k: int) -> None:
        msg = pack(_example(metas[k], k))
        while True:
            t0 = time.monotonic()
            if t0 >= t_end:
                return
            await conns[k].send(msg)
            reply = await conns[k].recv()
            t1 = time.monotonic()
            if isinstance(reply, str):
                errors.append(reply)
                return
            if t0 >= t_start:
                lat.append(t1 - t0)
                batch.append(int(unpack(reply)["server_timing"]["batch_size"]))

    await asyncio.gather(*(lane(k) for k in range(clients)))
    for ws in conns:
        await ws.close()
    ms = 1e3 * np.asarray(lat) if lat else np.zeros(1)
    return {"clients": clients, "requests": len(lat), "seconds": seconds,
            "requests_per_s": len(lat) / seconds, "p50_ms": float(np.percentile(ms, 50)),
            "p95_ms": float(np.percentile(ms, 95)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_batch": float(np.mean(batch)) if batch else 0.0, "errors": errors[:3]}


def _start_server(checkpoint: str, extra: list[str], log_path: str) -> tuple[subprocess.Popen, str]:
    """`python -m vlajax.serve` on a free port (stderr to `log_path`). -> (process, ws url)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("XLA_FLAGS", None)  # one CPU device, as a user runs it
    with open(log_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "vlajax.serve", "--checkpoint", checkpoint, "--port", "0",
                                 *extra], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + 900
    while True:
        try:
            line = lines.get(timeout=1.0)
            break
        except queue.Empty:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                with open(log_path) as f:
                    tail = "".join(f.readlines()[-15:])
                raise RuntimeError(f"the server did not start (exit code {proc.poll()}):\n{tail}") from None
    if not line.startswith("serving "):
        proc.kill()
        raise RuntimeError(f"unexpected server output {line!r}")
    return proc, line.split()[1]


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    c = [r["clients"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.plot(c, [r["requests_per_s"] for r in rows], "o-")
    a.set(xscale="log", xlabel="concurrent clients", ylabel="requests / s", title="throughput")
    for key, style in (("p50_ms", "o-"), ("p95_ms", "s--")):
        b.plot(c, [r[key] for r in rows], style, label=key[:3])
    b.set(xscale="log", xlabel="concurrent clients", ylabel="latency (ms)", title="round-trip latency")
    b.legend()
    for ax in (a, b):
        ax.set_xticks(c, [str(x) for x in c])
    fig.suptitle(f"vlajax.serve, {result['policy']}, B_max {result['max_batch']}, "
                 f"T_max {result['max_wait_ms']} ms (CPU)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    clients: tuple[int, ...] = (1, 4, 16, 64)  # concurrent client counts
    json: str = ""  # write the result here (and a plot next to it, .png)
    preset: str = "sft-small"  # preset whose model is served (no --checkpoint)
    checkpoint: str = ""  # serve this checkpoint instead of an initialized --preset model
    seconds: float = 8.0  # measured seconds per client count
    warmup_s: float = 2.0  # unmeasured seconds before each measurement
    max_batch: int = 16  # server B_max
    max_wait_ms: float = 5.0  # server T_max


def main(argv: list[str]) -> int:
    a = cli.parse(Args, argv, prog="python -m vlajax.bench serve", description=__doc__.split("\n\n")[0])
    if min(a.clients) < 1 or a.seconds <= 0 or a.warmup_s < 0 or a.max_batch < 1 or a.max_wait_ms < 0:
        print("error: --clients must be >= 1, --seconds > 0, --warmup-s >= 0, --max-batch >= 1, --max-wait-ms >= 0",
              file=sys.stderr)
        return 2
    if a.checkpoint and not os.path.isdir(a.checkpoint):
        print(f"error: --checkpoint {a.checkpoint}: not a directory", file=sys.stderr)
        return 2
    from vlajax.config import ConfigError, get_config

    try:
        cfg = get_config(a.preset)
    except (ConfigError, KeyError) as e:
        print(f"error: --preset: {e}", file=sys.stderr)
        return 2
    load_before = _loadavg()
    with tempfile.TemporaryDirectory(prefix="vlajax-bench-serve-") as tmp:
        ckpt = a.checkpoint
        if not ckpt:
            cfg = cfg.replace(checkpoint=dataclasses.replace(cfg.checkpoint, async_save=False))
            ckpt = write_init_checkpoint(os.path.join(tmp, "checkpoints"), cfg)
        proc, url = _start_server(ckpt, ["--max-batch", str(a.max_batch), "--max-wait-ms", str(a.max_wait_ms)],
                                  os.path.join(tmp, "server.log"))
        try:
            rows = []
            for c in a.clients:
                row = asyncio.run(_measure(url, c, a.warmup_s, a.seconds))
                print(json.dumps(row), flush=True)
                rows.append(row)
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(120)
    by = {r["clients"]: r for r in rows}
    result: dict[str, Any] = {
        "policy": a.checkpoint or f"{a.preset} (initialized)", "model": dataclasses.asdict(cfg.model)
        if not a.checkpoint else None, "max_batch": a.max_batch, "max_wait_ms": a.max_wait_ms,
        "seconds_per_row": a.seconds, "warmup_s": a.warmup_s, "rows": rows, "server_exit_code": rc,
        "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": _loadavg()},
        "command": "python -m vlajax.bench serve " + " ".join(argv),
    }
    if 1 in by and 16 in by:
        ratio = by[16]["requests_per_s"] / max(by[1]["requests_per_s"], 1e-9)
        tail = by[16]["p95_ms"] / max(by[1]["p50_ms"], 1e-9)
        result["targets"] = {"rps16_over_rps1": ratio, "rps_target": 6.0, "rps_met": ratio >= 6.0,
                             "p95_16_over_p50_1": tail, "latency_target": 3.0, "latency_met": tail <= 3.0}
    print(json.dumps({k: v for k, v in result.items() if k not in ("rows", "model")}), flush=True)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
        plot(result, os.path.splitext(a.json)[0] + ".png")
    return 0
