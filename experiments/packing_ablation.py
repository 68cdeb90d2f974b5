"""Packing ablation: fixed vs dynamic padding vs packing, effective tokens/s of the SFT step.

    .venv/bin/python experiments/packing_ablation.py [--debug] [--json runs/experiments/packing_ablation.json]

The measurement is `vlajax.bench.packing.run_bench` (imported, not copied): the jitted SFT
train step (forward, backward, AdamW) on one mixed-length synthetic LeRobot dataset read
through the real input pipeline, the three batching modes of `vlajax.data` timed in one run,
interleaved batch by batch. Full size is the bench's prefix-heavy VLA (4 x 256 layers, 3072-wide
MLPs, 200-token padded prefix) on batches of 32 samples; `--debug` swaps in a tiny model and
batches of 8 (a wiring check: the speedup there says nothing). Rows: padding fraction,
effective (non-padding prefix) tokens/s, samples/s and the ratio to fixed padding. Writes JSON
plus a markdown table next to it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from typing import Any
from unittest import mock

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from experiments.outputs import write_results  # noqa: E402
from vlajax.shared import cli  # noqa: E402

MODES = ("fixed", "dynamic", "packed")


@dataclasses.dataclass(frozen=True)
class Config:
    batches: int = 6  # batches per mode
    repeats: int = 2  # timed passes over them
    batch_samples: int = 0  # samples per batch (0 = the bench's, 32)
    model: tuple[tuple[str, Any], ...] = ()  # ModelConfig fields replacing the bench model's (() = the bench's)


# A tiny VLA with the bench model's prefix layout (32x32 images, patch 4 -> 64 tokens per camera, 64 text slots).
_DEBUG_MODEL = (("vit_width", 16), ("vit_mlp_dim", 32), ("width", 32), ("depth", 1), ("num_heads", 2),
                ("num_kv_heads", 1), ("head_dim", 16), ("mlp_dim", 64), ("expert_width", 16),
                ("expert_mlp_dim", 32))


def get_config(debug: bool = False) -> Config:
    if debug:
        return Config(batches=1, repeats=1, batch_samples=8, model=_DEBUG_MODEL)
    return Config()


@contextlib.contextmanager
def _sized(bench, cfg: Config):
    """The bench module with this config's model and batch (unchanged for the full size)."""
    with contextlib.ExitStack() as stack:
        if cfg.model:
            base = bench._model_config
            stack.enter_context(mock.patch.object(
                bench, "_model_config", lambda: dataclasses.replace(base(), **dict(cfg.model))))
        if cfg.batch_samples:
            stack.enter_context(mock.patch.object(bench, "BATCH", cfg.batch_samples))
        yield bench


def rows(result: dict) -> list[dict]:
    """One row per batching mode from the bench's result."""
    out = []
    for m in MODES:
        out.append({"mode": m, "row_shape": result[f"{m}_row_shape"], "padding": result[f"{m}_padding_fraction"],
                    "tokens_per_s": result[f"{m}_tokens_per_s"], "samples_per_s": result[f"{m}_samples_per_s"],
                    "vs_fixed": result[f"{m}_tokens_per_s"] / result["fixed_tokens_per_s"],
                    "seconds": result[f"{m}_seconds"]})
    return out


def markdown(result: dict) -> str:
    s = result["setup"]
    head = (f"Batches of {s['batch_samples']} samples, prefix layout {s['prefix_len']} tokens, mean prefix "
            f"{s['mean_prefix_tokens']:.0f} tokens; {s['batches_per_mode']} batches x {s['repeats']} passes per "
            f"mode; load average {s['load_average'][0]:.1f}.\n\n"
            "| mode | rows x tokens per batch | padding | effective tokens/s | samples/s | vs fixed |\n"
            "|---|---|---:|---:|---:|---:|\n")
    return head + "".join(
        f"| {r['mode']} | {r['row_shape'][0]} x {r['row_shape'][1]} | {100 * r['padding']:.1f}% "
        f"| {r['tokens_per_s']:.0f} | {r['samples_per_s']:.2f} | {r['vs_fixed']:.2f}x |\n" for r in rows(result))


def run(cfg: Config, json_path: str) -> dict:
    """Measure once; write `json_path` and the markdown table next to it. -> the JSON dict."""
    from vlajax.bench import packing as bench
    from vlajax.shared import compile_cache

    compile_cache.enable()
    with _sized(bench, cfg):
        result = bench.run_bench(cfg.batches, cfg.repeats)
    out = {"experiment": "packing_ablation", "config": dataclasses.asdict(cfg), "rows": rows(result),
           "bench": result}
    write_results(out, markdown(result), json_path)
    return out


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    debug: bool = False  # tiny model, one batch per mode (tests)
    json: str = "runs/experiments/packing_ablation.json"


if __name__ == "__main__":
    a = cli.parse(Args, None, description=__doc__.split("\n")[0])
    run(get_config(a.debug), a.json)
