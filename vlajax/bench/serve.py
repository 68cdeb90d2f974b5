"""`python -m vlajax.bench serve --clients 1 4 16 64 --json results/bench/serve.json`.

Serving throughput and latency with cross-client batching. `python -m vlajax.serve`
subprocesses serve the policy (default: the `sft-small` preset's model, initialized and saved
as an SFT checkpoint -- weights do not change the cost of a forward pass; `--checkpoint DIR`
serves a trained one), one per `--replicas` setting (default: 1 replica, and the server's
default `0` = auto: on a CPU host one replica per core) and `--wait` rule (default `adaptive`,
the server's default: no connection is held for a batch that cannot grow; `fixed`: B_max / T_max
only), all started before the first measurement. For each repeat, each server and each client
count C (interleaved, so slow phases of a shared machine hit every configuration), C websocket
connections in this process each run closed-loop (send an observation, wait for its actions,
send the next) for `--seconds` after `--warmup-s`; per row: requests/s, latency p50 / p95 /
p99 (ms, client-side, round trip), the mean batch size the server fired and the replicas it
ran on. Everything is real: real model, real websockets on loopback, clients in this process on
the same cores as the server.

Per server setting, every client count's requests/s over the single client's and its p95 over
the single client's p50 are ratios within one repeat, reported as median [min, max] over
repeats; the targets (against the adaptive single client) are those at 16
clients, not tuned for: >= 6x the requests/s of 1 client; p95 <= 3x the single-client p50. The
machine load (`/proc/loadavg`) before, after and before each row is recorded.

`--baseline DIR` A/Bs server code: every `--replicas` setting is also served from the vlajax
checkout at DIR (e.g. `git archive <commit> vlajax | tar -x -C DIR`), interleaved with this
checkout's servers in every repeat; rows and summaries carry `code` ('current' / 'baseline').
The clients are this checkout's in both arms.
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

from vlajax.config.schema import ConfigError, get_config
from vlajax.data.normalize import NormStats
from vlajax.policies import run_files
from vlajax.policies.bridge import Bridge
from vlajax.serve.codec import pack, unpack
from vlajax.shared import cli
from vlajax.training import checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WAIT_FLAGS = {"adaptive": "--fire-when-all-waiting", "fixed": "--no-fire-when-all-waiting"}  # --wait -> server flag


def write_init_checkpoint(directory: str, cfg, *, seed: int = 0) -> str:
    """An SFT-layout checkpoint (config.json, policy.json, step 0) of `cfg`'s freshly initialized
    model, with unit normalization statistics. -> `directory`."""
    import jax

    cameras = tuple(sorted(cfg.env.cameras))

    def stats(d):
        z, o = np.zeros(d, np.float32), np.ones(d, np.float32)
        return NormStats(mean=z, std=o, q01=-o, q99=o)

    bridge = Bridge(cfg.model, cameras, {"actions": stats(cfg.model.action_dim), "state": stats(8)},
                    env_action_dim=min(cfg.model.action_dim, 4))
    state = jax.jit(run_files.init_fn(cfg, cameras))(jax.random.key(seed))
    state = jax.tree.map(lambda x: x.value if hasattr(x, "value") else x, state, is_leaf=lambda x: hasattr(x, "value"))
    run_files.write_policy(directory, cfg, bridge, "sft")
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


def _server_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of a server's threads: the event loop (main thread), its other Python
    threads (dispatcher, one per replica) and XLA's own threads (tf_*: where the forward passes run)."""
    out = {"loop": 0.0, "threads": 0.0, "xla": 0.0}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended
            continue
        comm, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        key = "loop" if int(tid) == pid else "xla" if comm.startswith("tf_") else "threads"
        out[key] += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return out


async def _measure(url: str, clients: int, warmup_s: float, seconds: float, pid: int | None = None) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    conns = [await connect(url, compression=None, max_size=None, open_timeout=60) for _ in range(clients)]
    metas = [unpack(await ws.recv()) for ws in conns]
    t_start = time.monotonic() + warmup_s
    t_end = t_start + seconds
    lat: list[float] = []
    batch: list[int] = []
    server_ms: list[tuple] = []  # (queue_ms, infer_ms the server reported, round trip s, batch size) per request
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
                timing = unpack(reply)["server_timing"]
                batch.append(int(timing["batch_size"]))
                server_ms.append((timing["queue_ms"], timing["infer_ms"], t1 - t0, timing["batch_size"]))

    cpu: dict[str, Any] = {}

    async def account() -> None:  # CPU the server and this process (the clients) spent in the measured window
        await asyncio.sleep(max(t_start - time.monotonic(), 0.0))
        s0, c0 = _server_cpu(pid) if pid else {}, time.process_time()
        await asyncio.sleep(max(t_end - time.monotonic(), 0.0))
        s1, c1 = _server_cpu(pid) if pid else {}, time.process_time()
        cpu.update({k: s1[k] - s0[k] for k in s0}, client=c1 - c0)

    await asyncio.gather(account(), *(lane(k) for k in range(clients)))
    for ws in conns:
        await ws.close()
    n = max(len(lat), 1)
    ms = 1e3 * np.asarray(lat) if lat else np.zeros(1)
    return {"clients": clients, "requests": len(lat), "seconds": seconds,
            "requests_per_s": len(lat) / seconds, "p50_ms": float(np.percentile(ms, 50)),
            "p95_ms": float(np.percentile(ms, 95)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_batch": float(np.mean(batch)) if batch else 0.0, "errors": errors[:3],
            # where the round trip went: waiting for the batch to fire, the batch's inference; the rest
            # is transport, (de)serialization and thread hand-offs on both sides
            "server_queue_ms_mean": float(np.mean([m[0] for m in server_ms])) if server_ms else 0.0,
            "server_infer_ms_mean": float(np.mean([m[1] for m in server_ms])) if server_ms else 0.0,
            **_tail(server_ms),
            # CPU ms per answered request (measured window; load-independent where latency is not): the
            # server's event loop, its other Python threads, XLA's compute threads; the bench's clients
            "cpu_ms_per_request": {k: 1e3 * v / n for k, v in cpu.items()},
            "server_replicas": metas[0].get("batching", {}).get("replicas", 1),
            "server_bucket_ms": metas[0].get("batching", {}).get("bucket_ms")}  # the split's cost model


def _tail(server_ms: list[tuple]) -> dict[str, float]:
    """Where the slowest 5% of round trips went: mean server queue / inference ms and batch size."""
    if not server_ms:
        return {}
    m = np.asarray(server_ms, dtype=np.float64)
    tail = m[m[:, 2] >= np.percentile(m[:, 2], 95)]
    return {"tail_queue_ms": float(tail[:, 0].mean()), "tail_infer_ms": float(tail[:, 1].mean()),
            "tail_batch": float(tail[:, 3].mean())}


def _start_server(checkpoint: str, extra: list[str], log_path: str, repo: str = REPO) -> tuple[subprocess.Popen, str]:
    """`python -m vlajax.serve` of the checkout `repo` on a free port (stderr to `log_path`). -> (process, ws url)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("XLA_FLAGS", None)  # one CPU device, as a user runs it
    with open(log_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "vlajax.serve", "--checkpoint", checkpoint, "--port", "0",
                                 *extra], cwd=repo, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + 900
    other: list[str] = []  # what imports print before the server's line (e.g. mujoco_mjx: "Failed to import warp")
    while True:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                with open(log_path) as f:
                    tail = "".join(other[-5:] + f.readlines()[-15:])
                raise RuntimeError(f"the server did not start (exit code {proc.poll()}):\n{tail}") from None
            continue
        if line.startswith("serving "):
            return proc, line.split()[1]
        other.append(line)


def _forward_device() -> str:
    """What the server computes on: its environment is this process's, so JAX picks the same backend."""
    import jax

    return f"{jax.default_backend()} ({jax.devices()[0].device_kind})"


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    for setting in result["summary"]:
        rows = setting["rows"]
        c = [r["clients"] for r in rows]
        label = (f"replicas {setting['server_replicas']}, {setting.get('wait_rule', 'adaptive')}"
                 + (f", {setting['code']}" if result.get("baseline") else ""))

        def band(key, rows=rows):
            med = np.asarray([r[key]["median"] for r in rows])
            return med, np.stack([med - [r[key]["min"] for r in rows], [r[key]["max"] for r in rows] - med])

        med, err = band("requests_per_s")
        a.errorbar(c, med, yerr=err, fmt="o-", capsize=3, label=label)
        for key, style in (("p50_ms", "o-"), ("p95_ms", "s--")):
            med, err = band(key)
            b.errorbar(c, med, yerr=err, fmt=style, capsize=3, label=f"{key[:3]}, {label}")
        for ax in (a, b):
            ax.set_xticks(c, [str(x) for x in c])
    a.set(xscale="log", xlabel="concurrent clients", ylabel="requests / s", title="throughput (median, min-max)")
    b.set(xscale="log", xlabel="concurrent clients", ylabel="latency (ms)", title="round-trip latency")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.suptitle(f"vlajax.serve, {result['policy']}, B_max {result['max_batch']}, "
                 f"T_max {result['max_wait_ms']} ms, {result['repeats']} repeats (CPU, "
                 f"{result['machine']['cpus']} cores)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": float(np.median(values)), "min": float(np.min(values)), "max": float(np.max(values))}


def summarize(rows: list[dict[str, Any]], replicas: tuple[int, ...],
              codes: tuple[str, ...] = ("current",), waits: tuple[str, ...] = ("adaptive",)) -> list[dict[str, Any]]:
    """Per server setting (code, replicas, wait rule): per client count median/min/max over repeats,
    each count's requests/s over the single client's and p95 over the single client's p50 (ratios of
    rows measured in the same repeat), and the targets (16 clients) from those ratios."""
    out = []
    for code, setting, wait in [(c, r, w) for c in codes for r in replicas for w in waits]:
        mine = [r for r in rows if r["replicas_flag"] == setting and r.get("code", "current") == code
                and r.get("wait_rule", "adaptive") == wait]
        if not mine:
            continue
        counts = sorted({r["clients"] for r in mine})
        per = [{"clients": c, **{k: _stats([r[k] for r in mine if r["clients"] == c])
                                 for k in ("requests_per_s", "p50_ms", "p95_ms", "p99_ms", "mean_batch")}}
               for c in counts]
        by = {(r["repeat"], r["clients"]): r for r in mine}
        reps = sorted({r["repeat"] for r in mine})
        for row in per:  # paired ratios: this count against the single client of the same repeat
            pairs = [(by[k, row["clients"]], by[k, 1]) for k in reps if (k, 1) in by and (k, row["clients"]) in by]
            if pairs:
                row["rps_over_1"] = _stats([a["requests_per_s"] / max(b["requests_per_s"], 1e-9) for a, b in pairs])
                row["p95_over_p50_1"] = _stats([a["p95_ms"] / max(b["p50_ms"], 1e-9) for a, b in pairs])
        for row in per:
            cpus = [r["cpu_ms_per_request"] for r in mine
                    if r["clients"] == row["clients"] and r.get("cpu_ms_per_request")]
            if cpus:
                row["cpu_ms_per_request"] = {k: _stats([c[k] for c in cpus]) for k in cpus[0]}
        entry: dict[str, Any] = {"code": code, "replicas_flag": setting, "wait_rule": wait,
                                 "server_replicas": mine[0]["server_replicas"], "rows": per}
        if all((k, 1) in by and (k, 16) in by for k in reps):
            rps = [by[k, 16]["requests_per_s"] / max(by[k, 1]["requests_per_s"], 1e-9) for k in reps]
            tail = [by[k, 16]["p95_ms"] / max(by[k, 1]["p50_ms"], 1e-9) for k in reps]
            entry["targets"] = {
                "rps16_over_rps1": _stats(rps), "rps_target": 6.0, "rps_met": bool(np.median(rps) >= 6.0),
                "rps_met_every_repeat": bool(min(rps) >= 6.0),
                "p95_16_over_p50_1": _stats(tail), "latency_target": 3.0,
                "latency_met": bool(np.median(tail) <= 3.0), "latency_met_every_repeat": bool(max(tail) <= 3.0)}
        out.append(entry)
    return out


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
    replicas: tuple[int, ...] = (1, 0)  # one server per value of its --replicas (0 = its default, auto)
    # server wait rules, one server each: adaptive (the server's default: a batch also fires when every
    # open connection has its request in, so no connection waits for a batch that cannot grow) / fixed
    # (B_max / T_max only: a lone client waits T_max for company that never comes)
    wait: tuple[str, ...] = ("adaptive",)
    repeats: int = 3  # measurements of every (server, client count), interleaved
    baseline: str = ""  # also serve every --replicas setting from the vlajax checkout at this directory (A/B)


def main(argv: list[str]) -> int:
    a = cli.parse(Args, argv, prog="python -m vlajax.bench serve", description=__doc__.split("\n\n")[0])
    if (min(a.clients) < 1 or a.seconds <= 0 or a.warmup_s < 0 or a.max_batch < 1 or a.max_wait_ms < 0
            or not a.replicas or min(a.replicas) < 0 or len(set(a.replicas)) != len(a.replicas) or a.repeats < 1
            or not a.wait or len(set(a.wait)) != len(a.wait) or not set(a.wait) <= set(WAIT_FLAGS)):
        print("error: --clients must be >= 1, --seconds > 0, --warmup-s >= 0, --max-batch >= 1, --max-wait-ms >= 0, "
              "--replicas distinct values >= 0, --repeats >= 1, --wait distinct values of adaptive / fixed",
              file=sys.stderr)
        return 2
    if a.baseline and not os.path.isfile(os.path.join(a.baseline, "vlajax", "serve", "__main__.py")):
        print(f"error: --baseline {a.baseline}: not a vlajax checkout (no vlajax/serve/__main__.py)", file=sys.stderr)
        return 2
    if a.checkpoint and not os.path.isdir(a.checkpoint):
        print(f"error: --checkpoint {a.checkpoint}: not a directory", file=sys.stderr)
        return 2

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
        servers = {}
        codes = {"current": REPO, **({"baseline": os.path.abspath(a.baseline)} if a.baseline else {})}
        try:
            for code, repo in codes.items():
                for r in a.replicas:
                    for w in a.wait:
                        servers[code, r, w] = _start_server(
                            ckpt, ["--max-batch", str(a.max_batch), "--max-wait-ms", str(a.max_wait_ms),
                                   "--replicas", str(r), WAIT_FLAGS[w]], os.path.join(tmp, f"server_{code}{r}{w}.log"),
                            repo)
            rows = []
            for rep in range(a.repeats):
                for (code, r, w), (proc, url) in servers.items():
                    for c in a.clients:
                        measured = asyncio.run(_measure(url, c, a.warmup_s, a.seconds, proc.pid))
                        row = {"repeat": rep, "code": code, "replicas_flag": r, "wait_rule": w,
                               "load_before_row": _loadavg()[0], **measured}
                        print(json.dumps(row), flush=True)
                        rows.append(row)
        finally:
            exits = {}
            for (code, r, w), (proc, _) in servers.items():
                proc.send_signal(signal.SIGTERM)
                name = str(r) if code == "current" else f"{code}:{r}"
                exits[name if w == "adaptive" else f"{name}:{w}"] = proc.wait(120)
    result: dict[str, Any] = {
        "policy": a.checkpoint or f"{a.preset} (initialized)", "model": dataclasses.asdict(cfg.model)
        if not a.checkpoint else None, "max_batch": a.max_batch, "max_wait_ms": a.max_wait_ms,
        "seconds_per_row": a.seconds, "warmup_s": a.warmup_s, "repeats": a.repeats,
        "wait_rules": list(a.wait), "summary": summarize(rows, a.replicas, tuple(codes), a.wait),
        "rows": rows, "server_exit_codes": exits,
        "baseline": os.path.abspath(a.baseline) if a.baseline else None,
        "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": _loadavg()},
        "reality": f"all real: model forward on {_forward_device()} (the server's JAX default backend), websockets "
                   "over loopback, clients in the bench process on this host's CPUs",
        "command": "python -m vlajax.bench serve " + " ".join(argv),
    }
    for entry in result["summary"]:
        print(json.dumps({"code": entry["code"], "server_replicas": entry["server_replicas"],
                          "wait_rule": entry["wait_rule"], "targets": entry.get("targets"),
                          "per_clients": {r["clients"]: {"rps_over_1": r.get("rps_over_1", {}).get("median"),
                                                         "p95_ms": r["p95_ms"]["median"]} for r in entry["rows"]}}),
              flush=True)
    print(json.dumps({k: v for k, v in result.items() if k not in ("rows", "model", "summary")}), flush=True)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
        plot(result, os.path.splitext(a.json)[0] + ".png")
    return 0
