"""`python -m vlajax.serve --checkpoint DIR [--port 8000] [--host 127.0.0.1] [options]`.

Loads any policy checkpoint (SFT, sync RL, async RL: `vlajax.load_policy`), compiles the
sampling function for every batch-size bucket, then serves it over openpi's websocket
protocol (`vlajax.serve.server`) until SIGTERM / SIGINT. Every flag is checked before
anything is loaded or compiled; a bad one exits 2 with one `error:` line.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import ipaddress
import json
import logging
import os
import sys
from typing import Literal

import jax
import tyro

from vlajax.config.schema import TrainConfig
from vlajax.data.transforms import resize_with_pad
from vlajax.policies.bridge import POLICY_FILE
from vlajax.policies.policy import deterministic_answers
from vlajax.policies.run_files import load_policy
from vlajax.serve.batching import BatchedPolicy, default_buckets
from vlajax.serve.server import PolicyServer
from vlajax.serve.spec import KeyMap, ObsSpec
from vlajax.shared import compile_cache

log = logging.getLogger(__name__)

PROG = "python -m vlajax.serve"


@dataclasses.dataclass(frozen=True)
class ServeArgs:
    """Serve a checkpoint over openpi's websocket policy protocol, batching concurrent clients."""

    checkpoint: str  # checkpoint directory of an SFT, RL or async-RL run (or one of its <step> directories)
    port: int = 8000  # TCP port (0 = any free port; the chosen one is printed)
    host: str = "127.0.0.1"  # interface to bind; loopback by default (0.0.0.0 exposes the policy to the network)
    step: int = -1  # checkpoint step to load (-1 = the newest)
    # wire key map (auto = the checkpoint's: an imported openpi policy's robot (libero, droid), else suite)
    keys: Literal["auto", "suite", "libero", "droid"] = "auto"
    key: tuple[str, ...] = ()  # overrides of single wire keys: 'CAMERA=KEY', 'state=KEY', 'prompt=KEY'
    replicas: int = 0  # policy copies, one per device, each with its own inference thread (0 = auto: docs/serving.md)
    max_batch: int = 16  # B_max: a batch fires when this many requests wait
    max_wait_ms: float = 5.0  # T_max: ... or when the oldest request has waited this long
    fire_when_all_waiting: bool = True  # ... or when every open connection's request is in (adaptive; docs/serving.md)
    buckets: tuple[int, ...] = ()  # static batch sizes compiled (default 1, 2, 4, ..., max_batch)
    max_message_mb: float = 8.0  # larger requests are answered with an error string
    deterministic: bool = True  # ODE sampler / argmax tokens (as eval); --no-deterministic samples
    seed: int = 0  # rng of the stochastic samplers (batch k uses fold_in(key(seed), k))
    drain_timeout_s: float = 30.0  # on SIGTERM, wait at most this long for in-flight requests
    noise_key: str = ""  # testing: a request may carry the flow's starting noise [H, action_dim] under this key

    def check(self) -> None:
        """Raise ValueError naming the first bad flag (before anything loads or compiles)."""
        if not os.path.isdir(os.path.expanduser(self.checkpoint)):
            raise ValueError(f"--checkpoint {self.checkpoint}: not a directory")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port {self.port}: must be in [0, 65535]")
        if self.replicas < 0:
            raise ValueError(f"--replicas {self.replicas}: must be >= 0 (0 = auto)")
        if self.max_batch < 1:
            raise ValueError(f"--max-batch {self.max_batch}: must be >= 1")
        if self.max_wait_ms < 0:
            raise ValueError(f"--max-wait-ms {self.max_wait_ms}: must be >= 0")
        if self.buckets and (sorted(set(self.buckets)) != list(self.buckets) or self.buckets[0] < 1
                             or self.buckets[-1] != self.max_batch):
            raise ValueError(f"--buckets {list(self.buckets)}: must increase, be >= 1 and end at --max-batch "
                             f"{self.max_batch}")
        if self.max_message_mb <= 0:
            raise ValueError(f"--max-message-mb {self.max_message_mb}: must be > 0")
        if self.drain_timeout_s < 0:
            raise ValueError(f"--drain-timeout-s {self.drain_timeout_s}: must be >= 0")
        if self.step < -1:
            raise ValueError(f"--step {self.step}: must be -1 (newest) or a step")
        for item in self.key:
            if "=" not in item:
                raise ValueError(f"--key {item!r}: must be NAME=KEY")
        if self.host not in ("localhost",):
            try:
                ipaddress.ip_address(self.host)
            except ValueError:
                raise ValueError(f"--host {self.host!r}: not an IP address (or 'localhost')") from None


def _policy_json(checkpoint: str) -> dict:
    """The raw `policy.json` of a checkpoint directory (or of the run of a `<dir>/<step>`)."""
    d = os.path.abspath(os.path.expanduser(checkpoint))
    for path in (os.path.join(d, POLICY_FILE), os.path.join(os.path.dirname(d), POLICY_FILE)):
        if os.path.isfile(path):
            with open(path) as f:
                return json.load(f)
    return {}


def _available_bytes() -> int:
    """MemAvailable of /proc/meminfo (else total physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def replica_devices(requested: int, param_bytes: int) -> list:
    """The devices the policy is copied to: the first `requested` local devices, or (0 = auto)
    every local accelerator, or on CPU every CPU device (`main` makes one per core) as far as
    the copies of the params fit in half the available memory (at least one)."""
    import jax

    devices = jax.local_devices()
    if requested:
        return devices[:requested]
    if devices[0].platform != "cpu":
        return devices
    fit = int(0.5 * _available_bytes() // max(param_bytes, 1))
    return devices[:max(1, min(len(devices), fit))]


def _resize(fn, size: int, img):
    """uint8 [h, w, 3] -> uint8 [size, size, 3] (`fn`: `vlajax.data.transforms.resize_with_pad`, PIL)."""
    return fn(img, size, size)


def build(args: ServeArgs) -> PolicyServer:
    """Load the checkpoint and compile every bucket. -> a server ready to `run()`."""
    compile_cache.enable(TrainConfig().compilation_cache_dir)
    if args.replicas > len(jax.local_devices()):
        raise ValueError(f"--replicas {args.replicas}: this process has {len(jax.local_devices())} local device(s) "
                         f"({jax.local_devices()[0].platform})")

    bridge, model, params, train_cfg, step = load_policy(os.path.expanduser(args.checkpoint), TrainConfig(),
                                                         None if args.step < 0 else args.step)
    params = jax.device_get(params)
    devices = replica_devices(args.replicas, sum(x.nbytes for x in jax.tree.leaves(params)))
    serving = _policy_json(args.checkpoint)
    robot = bridge.openpi.robot if bridge.openpi is not None else ""
    keys_name = args.keys if args.keys != "auto" else serving.get(
        "keys", robot if robot in ("libero", "droid") else "suite")
    keys = KeyMap.make(keys_name, bridge.cameras, args.key)
    if robot and keys_name in ("libero", "droid") and robot != keys_name:
        raise ValueError(f"--keys {keys_name}: the policy's openpi transforms are {robot!r}'s")
    size = train_cfg.env.image_size or bridge.model.image_size
    resize = None
    if bridge.model.family != "vla":  # π policies: any image size, resized with pad as openpi's ResizeImages
        size = bridge.model.image_size
        resize = functools.partial(_resize, resize_with_pad, size)

    def encode(text: str, state):  # the bridge's prompt format (π: SentencePiece, π0.5 with the state if it reads it)
        ids, mask = bridge.encode_instructions([text], {"state": state[None]})
        return ids[0], mask[0]

    m = bridge.model
    spec = ObsSpec(keys, (size, size, 3), int(bridge.norm["state"].mean.shape[-1]), m.max_text_len, m.vocab_size,
                   encode, resize, args.noise_key, (m.action_horizon, m.action_dim) if args.noise_key else ())
    buckets = args.buckets or default_buckets(args.max_batch)
    policy = BatchedPolicy(bridge, model, params, buckets, deterministic=args.deterministic, seed=args.seed,
                           devices=devices)
    seconds = policy.warmup(spec.parse(spec.example()))
    log.info("serve: compiled %d bucket(s) %s on %d replica(s) in %.1f s; ms per bucket %s", len(buckets),
             list(buckets), policy.replicas, seconds, {b: round(ms, 2) for b, ms in policy.bucket_ms.items()})
    metadata = {
        "server": "vlajax.serve",
        "protocol": "openpi websocket (msgpack-numpy)",
        # the checkpoint by its directory's name: the metadata goes to every client, this host's paths do not
        "policy": {"checkpoint": os.path.basename(os.path.normpath(os.path.expanduser(args.checkpoint))), "step": step,
                   "preset": train_cfg.name, "source": serving.get("source", "sft"),
                   "action_head": bridge.model.action_head,
                   # the same request always gets the same answer (no Gaussian start, no stochastic sampler)
                   "deterministic": deterministic_answers(bridge, args.deterministic),
                   "openpi": None if bridge.openpi is None else bridge.openpi.to_json()},
        "observation": spec.metadata(),
        "keys": keys.to_json(),
        "action": {"shape": [bridge.model.action_horizon, bridge.env_action_dim], "dtype": "float32",
                   **({"range": [-1.0, 1.0]} if bridge.openpi is None else {"space": "the robot's (openpi outputs)"})},
        **({"noise_key": args.noise_key} if args.noise_key else {}),
    }
    return PolicyServer(policy, spec, metadata, host=args.host, port=args.port, max_wait_s=args.max_wait_ms / 1e3,
                        max_message_bytes=int(args.max_message_mb * (1 << 20)), drain_timeout_s=args.drain_timeout_s,
                        fire_when_all_waiting=args.fire_when_all_waiting)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = tyro.cli(ServeArgs, args=argv, prog=PROG)
    try:
        args.check()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        import jax  # before any backend starts: one CPU device per core (replicas on a CPU host)

        with contextlib.suppress(RuntimeError):  # a backend already runs (main called in-process): keep its devices
            jax.config.update("jax_num_cpu_devices", os.cpu_count() or 1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("absl").setLevel(logging.WARNING)  # Orbax's restore chatter
    try:
        server = build(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    def ready(port: int) -> None:
        print(f"serving ws://{args.host}:{port}", flush=True)

    asyncio.run(server.run(ready))
    return 0


