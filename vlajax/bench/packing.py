"""`python -m vlajax.bench packing --json PATH`: fixed vs dynamic padding vs packing.

One run measures the SFT training step (`vlajax.sft.train_step`: forward, backward, AdamW) on
the same mixed-length data in the three batching modes of `vlajax.data`, and reports
effective (non-padding prefix) tokens per second of each:

  data   a synthetic LeRobot dataset written with `LeRobotWriter` (2 cameras, 32x32), read
         through the real pipeline (`make_dataset`: grain source, transforms, batching);
         instructions of 1 to 15 words (3 to ~56 tokens), and the wrist camera is dropped from
         half of the samples, the agentview camera from a quarter (their 64 patch tokens
         disappear, like `RandomDropCamera`), so prefixes range from ~70 to ~190 tokens.
  model  a prefix-heavy VLA (32x32 images, patch 4 -> 64 tokens per camera, 64 text slots,
         4 x 256-wide layers with 3072-wide MLPs; light ViT and expert), `prefix_len` 200.
  modes  fixed: every row is 200 tokens; dynamic: rows padded to the batch's longest;
         packed: `pack_rows` rows of `pack_row_len` tokens, sized by `make_loader`'s rule
         from the mean prefix length.

Every mode first runs each of its batches once (compiling every shape), then the timed pass
interleaves the modes batch by batch (so load from other processes hits all modes alike).
Keys: `fixed_tokens_per_s`, `dynamic_tokens_per_s`, `packed_tokens_per_s`,
`packed_speedup_vs_fixed`, `padding_fraction` (of fixed padding, the waste packing removes),
plus per-mode padding fractions, samples/s and the setup.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import sys
import tempfile
import time

import jax
import numpy as np

from vlajax import cli

BATCH = 32


def _model_config():
    from vlajax.config import ModelConfig

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
    from vlajax.data.writer import LeRobotWriter, policy_features

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


def _host_batches(root: str, cfg, mode: str, n_batches: int, rows: int) -> list[dict]:
    from vlajax.data.build import make_source, make_transform
    from vlajax.data.loader import make_dataset
    from vlajax.data.normalize import load_norm_stats
    from vlajax.data.packing import PrefixSpec
    from vlajax.data.transforms import Compose

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


def run_bench(n_batches: int = 8, repeats: int = 2) -> dict:
    from vlajax import sharding
    from vlajax.config import DataConfig, MeshConfig, SFTConfig, TrainConfig
    from vlajax.data.build import packed_rows
    from vlajax.models.vla import VLA
    from vlajax.run_files import init_fn
    from vlajax.sft import make_train_step

    mcfg = _model_config()
    cfg = TrainConfig(model=mcfg, mesh=MeshConfig(dp=1), data=DataConfig(batch_size=BATCH),
                      sft=SFTConfig(num_steps=1000, warmup_steps=1))
    with tempfile.TemporaryDirectory() as tmp:
        root = write_mixed_dataset(os.path.join(tmp, "mixed"))
        fixed, spec = _host_batches(root, cfg, "fixed", n_batches, 0)
        mean_tokens = float(np.mean([(b["segment_ids"] > 0).sum() / b["sample_mask"].sum() for b in fixed]))
        rows = packed_rows(mean_tokens, BATCH, 2 * spec.length, 1)
        batches = {"fixed": fixed,
                   "dynamic": _host_batches(root, cfg, "dynamic", n_batches, 0)[0],
                   "packed": _host_batches(root, cfg, "packed", n_batches, rows)[0]}
    mesh = sharding.make_mesh(cfg.mesh, jax.devices()[:1])
    rules = cfg.mesh.logical_rules
    cams = ("agentview", "wrist")
    state, shardings = sharding.init_sharded(init_fn(cfg, cams), mesh, rules, jax.random.key(0))
    step = make_train_step(VLA(mcfg), 1, 0.0, shardings, mesh)
    dev = {m: [jax.device_put(b, sharding.data_sharding(mesh)) for b in bs] for m, bs in batches.items()}

    def one(state, b):
        state, metrics = step(state, b)
        jax.block_until_ready(metrics["loss"])
        return state

    with sharding.use_mesh(mesh, rules):
        t0 = time.perf_counter()
        for m in dev:  # compile every shape (dynamic: one per distinct padded length)
            for b in dev[m]:
                state = one(state, b)
        compile_s = time.perf_counter() - t0
        elapsed = dict.fromkeys(dev, 0.0)
        for _ in range(repeats):
            for i in range(n_batches):
                for m in dev:
                    t = time.perf_counter()
                    state = one(state, dev[m][i])
                    elapsed[m] += time.perf_counter() - t
    out: dict = {}
    for m, bs in batches.items():
        eff = sum(int((b["segment_ids"] > 0).sum()) for b in bs) * repeats
        slots = sum(int(b["segment_ids"].size) for b in bs) * repeats
        samples = sum(int(b["sample_mask"].sum()) for b in bs) * repeats
        out[f"{m}_tokens_per_s"] = eff / elapsed[m]
        out[f"{m}_samples_per_s"] = samples / elapsed[m]
        out[f"{m}_padding_fraction"] = 1.0 - eff / slots
        out[f"{m}_row_shape"] = list(bs[0]["segment_ids"].shape)
        out[f"{m}_seconds"] = elapsed[m]
    out["packed_speedup_vs_fixed"] = out["packed_tokens_per_s"] / out["fixed_tokens_per_s"]
    out["dynamic_speedup_vs_fixed"] = out["dynamic_tokens_per_s"] / out["fixed_tokens_per_s"]
    out["padding_fraction"] = out["fixed_padding_fraction"]
    out["setup"] = {
        "model": {k: getattr(mcfg, k) for k in ("image_size", "patch_size", "vit_width", "vit_depth", "width",
                                                  "depth", "mlp_dim", "max_text_len", "expert_width")},
        "prefix_len": mcfg.prefix_len, "batch_samples": BATCH, "pack_rows": rows, "pack_row_len": 2 * spec.length,
        "mean_prefix_tokens": mean_tokens, "batches_per_mode": n_batches, "repeats": repeats,
        "compile_and_warmup_s": round(compile_s, 1), "device": jax.devices()[0].device_kind,
        "cpu_count": os.cpu_count(), "load_average": list(os.getloadavg()),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    return out


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: str = ""  # write the results here
    batches: int = 8  # batches per mode
    repeats: int = 2  # timed passes over the batches


def main(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog="python -m vlajax.bench packing", description=__doc__.split("\n\n")[0])
    out = run_bench(args.batches, args.repeats)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
