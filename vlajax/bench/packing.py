"""`python -m vlajax.bench packing --json PATH`: fixed vs dynamic padding vs packing.

One run measures the SFT training step (`vlajax.sft.loop.train_step`: forward, backward, AdamW) on
mixed-length data in the three batching modes of `vlajax.data`, and reports effective
(non-padding prefix) tokens per second of each. Every row of the output declares its data and
its model shape.

  data (`--data`, one or more; each measured in turn, its three modes interleaved):
    demos      our demonstrations exactly as `python -m vlajax.train demos` writes them
               (`vlajax.data.demos.generate`: scripted MJX episodes of the goal suite's 4 tasks, both
               cameras at 32x32, `--episodes-per-task` successful episodes per task, episode
               length 200 as in `sft-small`), generated at bench time into a temp dir, read
               through `make_loader` (the SFT input pipeline, default data config: no camera
               dropout, no augmentation; packed rows sized by its own rule, `fit_packed_layout`:
               rows and row length from a first-fit of the records' prefix lengths). Lengths vary only
               with the instruction (goal: 5-16 tokens); every sample has both cameras.
    mixture    two demo datasets written by the same generator with different camera counts:
               the goal suite with both cameras (the `demos` dataset) and the spatial suite
               with the agentview camera only (`--env.cameras agentview`, which the generator
               writes natively), mixed 1:1. vlajax.data has no multi-dataset loader, so the
               mixture is declared as built here: each dataset gets the SFT pipeline's own
               steps (`make_source`, its own cameras and `meta/stats.json` in `make_transform`,
               grain's index shuffle and repeat as in `make_dataset`), grain's
               `IterDataset.mix` interleaves them with weights 1:1, and vlajax.data's
               `PackedBatchDataset` batches the result in each mode; a one-camera sample
               leaves its wrist slots empty (the model's `image_masks`), as a dropped camera
               does. Packed rows sized by `make_loader`'s rule.
    synthetic  (the earlier, synthetic mix; kept for comparability) random 32x32 images
               written with `LeRobotWriter`, instructions of 1 to 15 random words (3 to ~56
               tokens), the wrist camera dropped from half of the samples and the agentview
               camera from a quarter (like `RandomDropCamera`), read through `make_dataset`;
               packed rows of 2 x the prefix, sized from the fixed batches' mean.
  model  a prefix-heavy VLA (32x32 images, patch 4 -> 64 tokens per camera, 64 text slots,
         4 x 256-wide layers; light ViT and expert), `prefix_len` 200, with gated MLPs of
         `--mlp-ratio` x the width: 8 by default, Gemma 2B's ratio (mlp_dim 16,384 / width 2,048,
         `vlajax.config.schema`'s `gemma_2b`, the same numbers as openpi's `gemma.get_config`); the
         earlier figure used 12 (3072 / 256).
         `--text-len` sets the text slots (default 64, room for the synthetic mix's longest
         instruction; our demos' instructions are 5-30 tokens: goal 5-16, spatial 11-30).
  modes  fixed: every row is 200 tokens; dynamic: rows padded to the batch's longest;
         packed: rows of `pack_row_len` tokens.

Every mode first runs each of its batches once (compiling every shape), then the timed passes
interleave the modes batch by batch (so load from other processes hits all modes alike).
`run_bench` (the Python API, used by `experiments/packing_ablation.py`) measures one data
choice and returns flat keys: `fixed_tokens_per_s`, `dynamic_tokens_per_s`,
`packed_tokens_per_s`, `packed_speedup_vs_fixed`, `padding_fraction` (of fixed padding, the
waste packing removes), per-mode padding fractions, samples/s, per-pass speedups, the split of
fixed padding into empty camera slots and empty text slots, and the setup (with `data` and the
model shape). The command writes `{"rows": [...], "runs": {data: run_bench(...)}}`: one row per
(data, mode).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import tempfile
import time
from typing import Literal

import jax
import numpy as np

from vlajax.bench import write_result
from vlajax.config.schema import (
    GEMMA_VARIANTS,
    DataConfig,
    EnvConfig,
    LoggingConfig,
    MeshConfig,
    ModelConfig,
    SFTConfig,
    TrainConfig,
)
from vlajax.data import demos
from vlajax.data.build import fit_packed_layout, make_loader, make_source, make_transform, packed_rows
from vlajax.data.lerobot import LeRobotData
from vlajax.data.loader import make_dataset
from vlajax.data.normalize import load_norm_stats
from vlajax.data.packing import PackedBatchDataset, PrefixSpec
from vlajax.data.source import ActionChunkSource
from vlajax.data.transforms import Compose
from vlajax.data.writer import LeRobotWriter, policy_features
from vlajax.models.vla import VLA
from vlajax.policies.run_files import init_fn
from vlajax.sft.loop import make_train_step
from vlajax.shared import cli
from vlajax.training import sharding

BATCH = 32
DATA = ("demos", "mixture", "synthetic")
# Gemma 2B (the PaliGemma backbone of pi0 / pi0.5): mlp_dim 16_384 / width 2_048 = 8 (vlajax.config.schema's
# "gemma_2b" variant, the numbers of openpi's gemma.get_config("gemma_2b"))
GEMMA_2B_MLP_RATIO = GEMMA_VARIANTS["gemma_2b"]["mlp_dim"] / GEMMA_VARIANTS["gemma_2b"]["width"]
DEMO_SUITE, MIX_SUITE = "goal", "spatial"


def _model_config():
    return ModelConfig(name="bench-packing", image_size=32, patch_size=4, num_cameras=2, vit_width=32, vit_depth=1,
                       vit_heads=2, vit_mlp_dim=64, width=256, depth=4, num_heads=4, num_kv_heads=2, head_dim=64,
                       mlp_dim=3072, max_text_len=64, expert_width=64, expert_mlp_dim=128, action_dim=4,
                       action_horizon=4, num_denoise_steps=1, state_dim=8)


def _instruction(rng: np.random.Generator) -> str:
    words = ["pick", "up", "the", "red", "cube", "and", "place", "it", "in", "blue", "square", "then", "press",
             "button", "carefully", "slowly", "leftmost", "zigzag", "quickly"]
    n = int(rng.integers(1, 16))
    return " ".join(rng.choice(words, n))


def write_mixed_dataset(root: str, episodes: int = 48, length: int = 16, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    with LeRobotWriter(root, fps=50, features=policy_features(("agentview", "wrist"), 32, 8, 4)) as w:
        for _ in range(episodes):
            state = rng.standard_normal((length, 8)).astype(np.float32)
            w.add_episode({
                "observation.images.agentview": rng.integers(0, 256, (length, 32, 32, 3), dtype=np.uint8),
                "observation.images.wrist": rng.integers(0, 256, (length, 32, 32, 3), dtype=np.uint8),
                "observation.state": state,
                "action": np.tanh(state[:, :4] + rng.standard_normal((length, 4))).astype(np.float32),
            }, task=_instruction(rng))
    return root


def _model(mlp_ratio: float = 0.0, text_len: int = 0):
    """The bench model; `mlp_ratio` > 0 sets mlp_dim = round(ratio x width), `text_len` > 0 the text
    slots (0 = `_model_config`'s own: 3072 = 12 x 256, 64 slots)."""
    mcfg = _model_config()
    if mlp_ratio:
        mcfg = dataclasses.replace(mcfg, mlp_dim=int(round(mlp_ratio * mcfg.width)))
    if text_len:
        mcfg = dataclasses.replace(mcfg, max_text_len=text_len)
    return mcfg


def _train_config(mcfg, root: str = "", mode: str = "packed"):
    return TrainConfig(model=mcfg, mesh=MeshConfig(dp=1), sft=SFTConfig(num_steps=1000, warmup_steps=1),
                       data=DataConfig(dataset_dir=root, batch_size=BATCH, batching=mode, num_threads=0, prefetch=2),
                       logging=LoggingConfig(progress="none"))


def write_demos(root: str, suite: str, cameras: tuple[str, ...], episodes_per_task: int, seed: int = 0) -> dict:
    """`python -m vlajax.train demos --env.suite SUITE --env.cameras CAMERAS --data.episodes-per-task N
    --env.num-envs N --env.image-size 32 --env.episode-length 200` (what `vlajax.data.demos.run` calls) into `root`."""

    cfg = TrainConfig(seed=seed, env=EnvConfig(suite=suite, num_envs=episodes_per_task, image_size=32,
                                               episode_length=200, cameras=tuple(cameras)),
                      data=DataConfig(dataset_dir=root, episodes_per_task=episodes_per_task),
                      logging=LoggingConfig(progress="none"))
    summary = demos.generate(cfg, root, progress="none")
    out = {"suite": suite, "episodes_per_task": episodes_per_task, "seed": seed, "generate_seconds": summary["seconds"],
           "expert_success": {t: v["expert_success"] for t, v in summary["tasks"].items()}}
    pathlib.Path(root + ".summary.json").write_text(json.dumps(out))
    return out


def _loader_batches(root: str, mcfg, mode: str, n_batches: int) -> tuple[list[dict], object, dict]:
    """`n_batches` host batches of `make_loader` (the SFT input pipeline) in `mode`."""
    loader, info = make_loader(_train_config(mcfg, root, mode), None)
    try:
        batches = [next(loader) for _ in range(n_batches)]
    finally:
        loader.close()
    return batches, info.spec, {"pack_rows": info.rows, "pack_row_len": info.row_len}


def _mixture_batches(roots: list[str], mcfg, mode: str, n_batches: int, rows: int = 0,
                     row_len: int = 0) -> tuple[list[dict], object]:
    """Datasets with their own cameras and norm stats, mixed 1:1 by grain, batched by vlajax.data."""
    import grain

    spec = PrefixSpec.from_model(mcfg, ("agentview", "wrist"))
    parts = []
    for root in roots:
        cfg = _train_config(mcfg, root, mode)
        src = make_source(cfg)
        cams = tuple(sorted(src.cameras))
        src = ActionChunkSource(src.data, mcfg.action_horizon, cameras=cams)
        stats = load_norm_stats(root, (src.action_key, src.state_key),
                                dims={src.action_key: src.action_dim, src.state_key: src.state_dim})
        norm = {"actions": stats[src.action_key], "state": stats[src.state_key]}
        transform = Compose(make_transform(cfg, cams, norm).inputs)
        ds = grain.MapDataset.source(src).seed(cfg.data.shuffle_seed).shuffle().repeat(None).map(transform)
        parts.append(ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=2 * BATCH)))
    mixed = grain.IterDataset.mix(parts, weights=[1.0] * len(parts))
    it = iter(PackedBatchDataset(mixed, spec, mode, BATCH, rows=rows, row_len=row_len))
    return [next(it) for _ in range(n_batches)], spec


def _host_batches(root: str, cfg, mode: str, n_batches: int, rows: int) -> list[dict]:

    src = make_source(cfg.replace(data=cfg.data.__class__(dataset_dir=root)))
    stats = load_norm_stats(root, (src.action_key, src.state_key))
    norm = {"actions": stats[src.action_key], "state": stats[src.state_key]}
    cams = ("agentview", "wrist")
    transform = Compose((*make_transform(cfg, cams, norm).inputs, _DropOneCamera()))
    spec = PrefixSpec.from_model(cfg.model, cams)
    ds = make_dataset(src, transform, spec, mode, BATCH, seed=0, rows=rows, row_len=2 * spec.length,
                      num_threads=0)
    it = iter(ds)
    return [next(it) for _ in range(n_batches)], spec


class _DropOneCamera:
    """Per record (deterministic in its index): drop the wrist camera with p = 1/2, the
    agentview camera with p = 1/4, neither with p = 1/4; a sample always keeps one camera."""

    def __call__(self, sample):
        u = np.random.default_rng([7, int(sample["index"])]).random()
        drop = "wrist" if u < 0.5 else "agentview" if u < 0.75 else None
        if drop is None:
            return sample
        return {**sample, "images": {c: v for c, v in sample["images"].items() if c != drop}}


def _sample_tokens(batches: list[dict], spec) -> np.ndarray:
    """Prefix tokens of every real sample of `batches` [n]."""
    out = []
    for b in batches:
        real = np.asarray(b["sample_mask"], bool)
        cams = sum(np.asarray(b["image_masks"][c], int) for c in spec.cameras) * spec.tokens_per_camera
        out.append((cams + np.asarray(b["token_mask"], int).sum(1) + int(spec.state_token))[real])
    return np.concatenate(out)


def padding_split(batches: list[dict], spec) -> dict:
    """Where the padding of fixed batches sits, as fractions of all their token slots: empty camera
    slots (a sample without that camera), empty text slots (instruction shorter than `text_len`),
    the layout's tail (`prefix_len` - raw slots) and empty sample slots (a short last batch)."""
    slots = sum(int(np.asarray(b["segment_ids"]).size) for b in batches)
    real = sum(int(np.asarray(b["sample_mask"]).sum()) for b in batches)
    cam = sum(int((~np.asarray(b["image_masks"][c], bool) & np.asarray(b["sample_mask"], bool)).sum())
              for b in batches for c in spec.cameras) * spec.tokens_per_camera
    text = sum(int((~np.asarray(b["token_mask"], bool)[np.asarray(b["sample_mask"], bool)]).sum()) for b in batches)
    raw = len(spec.cameras) * spec.tokens_per_camera + spec.text_len + int(spec.state_token)
    empty = sum(int((~np.asarray(b["sample_mask"], bool)).sum()) for b in batches) * spec.length
    return {"camera_slots": cam / slots, "text_slots": text / slots, "layout_tail": (spec.length - raw) * real / slots,
            "empty_samples": empty / slots}


class _Runner:
    """One model, its sharded train state and jitted step, shared by every data choice of a run."""

    def __init__(self, mcfg):
        self.mcfg = mcfg
        cfg = _train_config(mcfg)
        self.mesh = sharding.make_mesh(cfg.mesh, jax.devices()[:1])
        self.rules = cfg.mesh.logical_rules
        self.state, shardings = sharding.init_sharded(init_fn(cfg, ("agentview", "wrist")), self.mesh, self.rules,
                                                      jax.random.key(0))
        self.step = make_train_step(VLA(mcfg), 1, 0.0, shardings, self.mesh)

    def one(self, b) -> jax.Array:
        """One train step on batch `b`, waited for. -> its loss (a device scalar: read it after timing)."""
        self.state, metrics = self.step(self.state, b)
        return jax.block_until_ready(metrics["loss"])

    def measure(self, batches: dict[str, list[dict]], repeats: int) -> tuple[dict, float, dict]:
        """Seconds per mode per timed pass (modes interleaved batch by batch), compile+warm-up seconds,
        the losses of every step per mode (a non-finite loss would make the timing meaningless)."""
        dev = {m: [jax.device_put(b, sharding.data_sharding(self.mesh)) for b in bs] for m, bs in batches.items()}
        n = min(len(bs) for bs in dev.values())
        with sharding.use_mesh(self.mesh, self.rules):
            t0 = time.perf_counter()
            for m in dev:  # compile every shape (dynamic: one per distinct padded length)
                for b in dev[m]:
                    self.one(b)
            compile_s = time.perf_counter() - t0
            passes = {m: [] for m in dev}
            losses = {m: [] for m in dev}
            for _ in range(repeats):
                elapsed = dict.fromkeys(dev, 0.0)
                for i in range(n):
                    for m in dev:
                        t = time.perf_counter()
                        loss = self.one(dev[m][i])
                        elapsed[m] += time.perf_counter() - t
                        losses[m].append(float(loss))
                for m in dev:
                    passes[m].append(elapsed[m])
        return passes, compile_s, losses


def _data_batches(data: str, mcfg, n_batches: int, workdir: str, episodes_per_task: int) -> tuple[dict, object, dict]:
    """({mode: host batches}, PrefixSpec, the data's declaration and packing setup)."""
    if data == "synthetic":
        cfg = _train_config(mcfg)
        root = os.path.join(workdir, "synthetic")
        if not os.path.exists(root):
            write_mixed_dataset(root)
        fixed, spec = _host_batches(root, cfg, "fixed", n_batches, 0)
        mean = float(np.mean([(b["segment_ids"] > 0).sum() / b["sample_mask"].sum() for b in fixed]))
        rows = packed_rows(mean, BATCH, 2 * spec.length, 1)
        batches = {"fixed": fixed, "dynamic": _host_batches(root, cfg, "dynamic", n_batches, 0)[0],
                   "packed": _host_batches(root, cfg, "packed", n_batches, rows)[0]}
        decl = {"data": "synthetic", "datasets": [{"kind": "synthetic LeRobotWriter dataset", "episodes": 48,
                                                     "frames": 48 * 16, "cameras": ["agentview", "wrist"]}],
                "camera_drop": "wrist dropped from 1/2 of the samples, agentview from 1/4 (by record index)",
                "pipeline": "make_source + make_transform + make_dataset (+ the bench's camera drop)",
                "packing_rule": "rows of 2 x prefix_len, packed_rows(mean of the fixed batches)",
                "pack_rows": rows, "pack_row_len": 2 * spec.length}
        return batches, spec, decl
    demos_root = os.path.join(workdir, "demos_" + DEMO_SUITE)
    if not os.path.exists(demos_root):
        write_demos(demos_root, DEMO_SUITE, ("agentview", "wrist"), episodes_per_task)
    if data == "demos":
        batches, pack = {}, {}
        for m in ("fixed", "dynamic", "packed"):
            batches[m], spec, info = _loader_batches(demos_root, mcfg, m, n_batches)
            if m == "packed":
                pack = info
        decl = {"data": "demos", "datasets": [_describe(demos_root)],
                "camera_drop": "none (every sample has both cameras; lengths vary with the instruction)",
                "pipeline": "make_loader (the SFT input pipeline), default data config",
                "packing_rule": "make_loader's own (fit_packed_layout: rows and row length sized by first-fit of "
                                "32-sample draws from the prefix lengths of 256 records)", **pack}
        return batches, spec, decl
    if data != "mixture":
        raise ValueError(f"unknown data {data!r}; choose from {DATA}")
    mix_root = os.path.join(workdir, "demos_" + MIX_SUITE + "_agentview")
    if not os.path.exists(mix_root):
        write_demos(mix_root, MIX_SUITE, ("agentview",), episodes_per_task)
    roots = [demos_root, mix_root]
    fixed, spec = _mixture_batches(roots, mcfg, "fixed", n_batches)
    # make_loader's own sizing rule, for one process
    rows, row_len = fit_packed_layout(_sample_tokens(fixed, spec), BATCH, spec.length, 1,
                                      step=max(spec.seq_multiple, 8))
    batches = {"fixed": fixed, "dynamic": _mixture_batches(roots, mcfg, "dynamic", n_batches)[0],
               "packed": _mixture_batches(roots, mcfg, "packed", n_batches, rows, row_len)[0]}
    decl = {"data": "mixture", "datasets": [_describe(r) for r in roots], "weights": [1.0, 1.0],
            "camera_drop": "none; the spatial dataset was written with the agentview camera only, so its "
                           "samples leave the wrist slots empty",
            "pipeline": "per dataset: make_source, make_transform (own cameras and stats), grain shuffle + "
                        "repeat; grain IterDataset.mix 1:1; vlajax.data PackedBatchDataset (vlajax.data has no "
                        "multi-dataset loader: this mixing is the bench's)",
            "packing_rule": "make_loader's rule (fit_packed_layout: first-fit of 32-sample draws) on the fixed "
                            "batches' prefix lengths", "pack_rows": rows,
            "pack_row_len": row_len}
    return batches, spec, decl


def _describe(root: str) -> dict:
    d = LeRobotData(root)
    out = {"root": os.path.basename(root), "generator": "vlajax.data.demos.generate (python -m vlajax.train demos)",
           "episodes": d.num_episodes, "frames": len(d), "distinct_instructions": len(set(d.tasks)),
           "cameras": sorted(c.removeprefix("observation.images.") for c in d.cameras)}
    summary = root + ".summary.json"
    if os.path.exists(summary):
        out.update(json.loads(pathlib.Path(summary).read_text()))
    return out


def run_bench(n_batches: int = 8, repeats: int = 2, data: str = "synthetic", mlp_ratio: float = 0.0,
              episodes_per_task: int = 8, workdir: str | None = None, runner: _Runner | None = None,
              text_len: int = 0) -> dict:
    """Measure the three modes on one data choice (see the module docstring). `mlp_ratio` 0 keeps
    `_model_config`'s MLP (3072 = 12 x 256, the earlier figure's); `workdir` keeps generated
    datasets between calls (default: a temp dir removed afterwards)."""
    if workdir is None:
        with tempfile.TemporaryDirectory() as tmp:
            return run_bench(n_batches, repeats, data, mlp_ratio, episodes_per_task, tmp, runner, text_len)
    mcfg = runner.mcfg if runner is not None else _model(mlp_ratio, text_len)
    load_start = list(os.getloadavg())
    t_data = time.perf_counter()
    batches, spec, decl = _data_batches(data, mcfg, n_batches, workdir, episodes_per_task)
    data_s = time.perf_counter() - t_data
    runner = runner or _Runner(mcfg)
    passes, compile_s, losses = runner.measure(batches, repeats)
    n = min(len(bs) for bs in batches.values())
    out: dict = {"data": data}
    for m, bs in batches.items():
        bs = bs[:n]
        eff = sum(int((b["segment_ids"] > 0).sum()) for b in bs)
        slots = sum(int(b["segment_ids"].size) for b in bs)
        samples = sum(int(b["sample_mask"].sum()) for b in bs)
        elapsed = sum(passes[m])
        out[f"{m}_tokens_per_s"] = eff * repeats / elapsed
        out[f"{m}_samples_per_s"] = samples * repeats / elapsed
        out[f"{m}_padding_fraction"] = 1.0 - eff / slots
        out[f"{m}_row_shape"] = list(bs[0]["segment_ids"].shape)
        out[f"{m}_seconds"] = elapsed
        out[f"{m}_pass_seconds"] = passes[m]
        out[f"{m}_tokens_per_pass"] = eff
        out[f"{m}_loss_first_last"] = [losses[m][0], losses[m][-1]]
        out[f"{m}_nonfinite_losses"] = int(sum(not np.isfinite(x) for x in losses[m]))
    out["packed_speedup_vs_fixed"] = out["packed_tokens_per_s"] / out["fixed_tokens_per_s"]
    out["dynamic_speedup_vs_fixed"] = out["dynamic_tokens_per_s"] / out["fixed_tokens_per_s"]
    for m in ("packed", "dynamic"):  # per timed pass: the spread under the machine's load
        out[f"{m}_speedup_per_pass"] = [
            (out[f"{m}_tokens_per_pass"] / tm) / (out["fixed_tokens_per_pass"] / tf)
            for tm, tf in zip(passes[m], passes["fixed"], strict=True)]
    out["padding_fraction"] = out["fixed_padding_fraction"]
    out["fixed_padding_split"] = padding_split(batches["fixed"][:n], spec)
    tok = _sample_tokens(batches["fixed"][:n], spec)
    cams = np.concatenate([sum(np.asarray(b["image_masks"][c], int) for c in spec.cameras)[np.asarray(b["sample_mask"])]
                           for b in batches["fixed"][:n]])
    one_cam = float(np.mean(cams < len(spec.cameras)))
    out["prefix_tokens"] = {"min": int(tok.min()), "mean": float(tok.mean()), "max": int(tok.max()),
                            "samples": int(tok.size), "share_without_a_camera": one_cam}
    out["setup"] = {
        **decl,
        "model": {k: getattr(mcfg, k) for k in ("image_size", "patch_size", "num_cameras", "vit_width", "vit_depth",
                                                  "width", "depth", "num_heads", "num_kv_heads", "head_dim",
                                                  "mlp_dim", "max_text_len", "expert_width", "expert_mlp_dim")}
                 | {"mlp_ratio": mcfg.mlp_dim / mcfg.width, "tokens_per_camera": spec.tokens_per_camera},
        "prefix_len": mcfg.prefix_len, "batch_samples": BATCH,
        "mean_prefix_tokens": float(tok.mean()), "batches_per_mode": n, "repeats": repeats,
        "data_seconds": round(data_s, 1), "compile_and_warmup_s": round(compile_s, 1),
        "device": jax.devices()[0].device_kind, "cpu_count": os.cpu_count(), "load_average_start": load_start,
        "load_average": list(os.getloadavg()),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    return out


MODES = ("fixed", "dynamic", "packed")


def rows(result: dict) -> list[dict]:
    """One declared row per batching mode of one `run_bench` result."""
    s = result["setup"]
    return [{"data": result["data"], "datasets": s["datasets"], "model": s["model"], "prefix_len": s["prefix_len"],
             "mode": m, "row_shape": result[f"{m}_row_shape"], "padding": result[f"{m}_padding_fraction"],
             "tokens_per_s": result[f"{m}_tokens_per_s"], "samples_per_s": result[f"{m}_samples_per_s"],
             "vs_fixed": result[f"{m}_tokens_per_s"] / result["fixed_tokens_per_s"],
             "vs_fixed_per_pass": result.get(f"{m}_speedup_per_pass", [1.0] * s["repeats"]),
             "seconds": result[f"{m}_seconds"], "load_average": s["load_average"]} for m in MODES]


def run_all(data: tuple[str, ...], n_batches: int, repeats: int, mlp_ratio: float, episodes_per_task: int,
            text_len: int = 0) -> dict:
    """Every data choice in turn on one model (one state and jitted step: shapes shared across choices
    compile once)."""
    runner = _Runner(_model(mlp_ratio, text_len))
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for d in data:
            runs[d] = run_bench(n_batches, repeats, d, mlp_ratio, episodes_per_task, tmp, runner)
            print(json.dumps({"data": d, "packed_speedup_vs_fixed": runs[d]["packed_speedup_vs_fixed"],
                              "dynamic_speedup_vs_fixed": runs[d]["dynamic_speedup_vs_fixed"]}), flush=True)
    return {"benchmark": "packing", "rows": [r for d in data for r in rows(runs[d])], "runs": runs}


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: str = ""  # write the results here
    data: tuple[Literal["demos", "mixture", "synthetic"], ...] = ("demos", "mixture")  # data choices, in turn
    mlp_ratio: float = GEMMA_2B_MLP_RATIO  # model mlp_dim / width (8 = Gemma 2B's; the earlier figure: 12)
    text_len: int = 0  # model text slots (0 = the bench model's 64: room for the synthetic mix's longest, 56)
    episodes_per_task: int = 8  # demos / mixture: successful episodes per task of each generated dataset
    batches: int = 8  # batches per mode
    repeats: int = 2  # timed passes over the batches


def main(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog="python -m vlajax.bench packing", description=__doc__.split("\n\n")[0])
    if args.mlp_ratio <= 0 or args.batches < 1 or args.repeats < 1 or args.episodes_per_task < 1 or args.text_len < 0:
        cli.error("--mlp-ratio must be > 0; --batches, --repeats and --episodes-per-task >= 1; --text-len >= 0")
    out = run_all(tuple(dict.fromkeys(args.data)), args.batches, args.repeats, args.mlp_ratio, args.episodes_per_task,
                  args.text_len)
    out["command"] = "python -m vlajax.bench packing " + " ".join(argv)
    print(json.dumps(out["rows"], indent=1))
    write_result(args.json, out)
    return 0
