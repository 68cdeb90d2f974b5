"""FP8 post-training quantization: bytes saved and action error (and closed-loop success of a trained policy).

    .venv/bin/python experiments/fp8_ptq.py [--debug] [--json runs/experiments/fp8_ptq.json]

Each cell is one run of `vlajax.bench.fp8` (imported, not copied): block-wise FP8 PTQ of the
language tower (128x128 blocks, e4m3, float32 scales; vision tower untouched), parameter bytes
before/after (stored float32 and a bfloat16 baseline), and the max / mean absolute action error
of the quantized model against full precision on one fixed batch with the same sampler noise.
Full size: the `small` preset (25M params) fitted 30 flow-matching steps on a synthetic batch,
and the trained `sft-small` checkpoint of docs/results.md (`runs/sft-small/checkpoints`, goal
suite), where closed-loop success before and after PTQ is measured on the same 20 seeded
episodes per task. `--debug`: the `tiny` preset, 2 fit steps, batch 2 (a wiring check).
Writes JSON plus a markdown table next to it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from experiments.outputs import write_results  # noqa: E402
from vlajax.shared import cli  # noqa: E402

SFT_CHECKPOINT = "runs/sft-small/checkpoints"


@dataclasses.dataclass(frozen=True)
class Config:
    """Cells: (label, arguments of `python -m vlajax.bench fp8`)."""

    cells: tuple[tuple[str, tuple[str, ...]], ...]


def get_config(debug: bool = False) -> Config:
    if debug:
        return Config(cells=(("tiny (synthetic fit)", ("--preset", "tiny", "--fit-steps", "2", "--batch", "2")),))
    return Config(cells=(
        ("small (synthetic fit)", ("--preset", "small", "--fit-steps", "30", "--batch", "8")),
        ("sft-small checkpoint (goal suite)", ("--checkpoint", SFT_CHECKPOINT, "--batch", "8",
                                               "--episodes-per-task", "20")),
    ))


def row(label: str, r: dict) -> dict:
    """The table's figures of one bench result."""
    out = {
        "label": label, "preset": r["preset"], "parameters": r["parameters"],
        "language_bytes": [r["bytes_before"]["language"], r["bytes_after"]["language"]],
        "total_bytes": [r["bytes_before"]["total"], r["bytes_after"]["total"]],
        "saved_language": r["fraction_saved_language"], "saved_total": r["fraction_saved_total"],
        "saved_total_bf16": r["bf16_baseline"]["fraction_saved_total"],
        "action_err_max": r["actions"]["max_abs_error"], "action_err_mean": r["actions"]["mean_abs_error"],
        "mean_abs_action": r["actions"]["mean_abs_action"], "quantized_tensors": r["quantization"]["quantized_tensors"],
    }
    if "success" in r:
        s = r["success"]
        out["success"] = [s["full_precision"]["mean_success"], s["fp8_ptq"]["mean_success"]]
        out["episodes"] = s["full_precision"]["episodes"]
    return out


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


def markdown(rows: list[dict]) -> str:
    head = ("| model | params | language tower MB (fp32 -> fp8) | saved: language | saved: whole model "
            "(fp32 / bf16 baseline) | action error max / mean (mean abs action) | closed-loop success "
            "full -> fp8 |\n|---|---:|---|---:|---:|---|---|\n")
    lines = []
    for r in rows:
        lang = f"{_mb(r['language_bytes'][0])} -> {_mb(r['language_bytes'][1])}"
        succ = (f"{100 * r['success'][0]:.1f}% -> {100 * r['success'][1]:.1f}% ({r['episodes']} episodes)"
                if "success" in r else "n/a")
        lines.append(f"| {r['label']} | {r['parameters']:,} | {lang} | {100 * r['saved_language']:.1f}% "
                     f"| {100 * r['saved_total']:.1f}% / {100 * r['saved_total_bf16']:.1f}% "
                     f"| {r['action_err_max']:.4f} / {r['action_err_mean']:.5f} ({r['mean_abs_action']:.3f}) "
                     f"| {succ} |\n")
    return head + "".join(lines)


def run(cfg: Config, json_path: str) -> dict:
    """Every cell once; write `json_path` and the markdown table next to it. -> the JSON dict."""
    from vlajax.bench import fp8 as bench
    from vlajax.shared import compile_cache

    compile_cache.enable()
    results, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, args) in enumerate(cfg.cells):
            print(f"[fp8_ptq] cell {i + 1}/{len(cfg.cells)}: {label}", flush=True)
            path = os.path.join(tmp, f"cell{i}.json")
            code = bench.main([*args, "--json", path])
            if code:
                raise SystemExit(f"[fp8_ptq] cell {label!r} failed (exit {code})")
            with open(path) as f:
                r = json.load(f)
            results.append({"label": label, "args": list(args), "result": r})
            rows.append(row(label, r))
    out = {"experiment": "fp8_ptq", "config": dataclasses.asdict(cfg), "rows": rows, "cells": results}
    write_results(out, markdown(rows), json_path)
    return out


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    debug: bool = False  # the tiny preset, 2 fit steps (tests)
    json: str = "runs/experiments/fp8_ptq.json"


if __name__ == "__main__":
    a = cli.parse(Args, None, description=__doc__.split("\n")[0])
    run(get_config(a.debug), a.json)
