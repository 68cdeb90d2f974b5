"""Benchmarks: `python -m vlajax.bench NAME --json PATH`. Each writes JSON; ratios are in-run.

A benchmark is a module `vlajax.bench.<name>` with `main(argv: list[str]) -> int`.
"""

import os

from vlajax.shared.atomic_files import write_json

BENCHMARKS: dict[str, str] = {
    "env": "env steps/s with and without rendering vs C MuJoCo (vlajax.bench.env)",
    "fp8": "block-wise FP8 PTQ: bytes saved and action error (vlajax.bench.fp8)",
    "packing": "fixed vs dynamic padding vs packing, effective tokens/s (vlajax.bench.packing)",
    "async": "the production rl loops, sync vs async modes, in the mjx / cpu-sim / emulated-farm regimes "
             "(vlajax.bench.async_loops)",
    "rollout": "decisions/s of the pixel VLA rollout, flow and token heads (vlajax.bench.rollout)",
    "serve": "policy server requests/s and p50/p95 latency vs concurrent clients (vlajax.bench.serve)",
    "libero": "LIBERO workers: env steps/s with and without cameras, 1 vs 2 workers, env build, rendering variants "
              "with their pixels compared (vlajax.bench.libero, docs/libero.md)",
    "gpu-check": "the one prepared GPU check: pytest -m gpu, SFT bf16 vs TE FP8, attention, env, rollout, serve, "
                 "async, memory vs the planner; --dry-run on CPU (vlajax.bench.gpu_check, docs/gpu.md)",
    "memory": "parameter counts and the per-device SFT memory plan of a preset, nothing allocated "
              "(vlajax.bench.memory, docs/gpu-node.md)",
    "values": "every Literal / bool value each command reads, run to its first update or refused before compiling "
              "(vlajax.bench.values, docs/reliability.md)",
}


def write_result(path, result: dict) -> None:
    """Write a benchmark's `result` as JSON at `path` (parent folders made), atomically, and say so;
    `path` None or '' writes nothing."""
    if not path:
        return
    path = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(path, result)
    print(f"wrote {path}")
