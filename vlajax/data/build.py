"""From a `TrainConfig` to a running input pipeline: `make_loader(cfg, mesh) -> (Loader, DataInfo)`.

    loader, info = make_loader(cfg, mesh)     # checks the dataset against the model first
    batch = next(loader)                      # global arrays, keys in vlajax.data.packing
    actions = unnormalize(pred, info.norm["actions"], action_norm(cfg))

Order of the per-sample transforms: camera selection (`data.drop_cameras`) -> resize to
`model.image_size` -> camera dropout (`data.camera_dropout`; training only, never the first
camera) -> augmentation (`data.augment`) -> tokenization (`model.max_text_len`) ->
normalization with the dataset's `meta/stats.json` (errors, never skipped, when missing).
`data.batch_size` is the number of sample slots per global batch in every mode; in packed
mode `data.pack_rows` rows of `data.pack_row_len` tokens hold them (0 = sized from the mean
prefix length of up to 256 records, so that a batch carries about `batch_size` samples).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence

import jax
import numpy as np

from vlajax.config.schema import TrainConfig, action_norm
from vlajax.data import openpi
from vlajax.data.aux_frames import AuxFrameSource, MixedSource, grasp_place_frame_targets
from vlajax.data.lerobot import DatasetError, LeRobotData
from vlajax.data.loader import Loader, make_dataset
from vlajax.data.normalize import NormStats, load_norm_stats
from vlajax.data.packing import PrefixSpec
from vlajax.data.source import ActionChunkSource, grasp_place_raw, grasp_place_targets
from vlajax.data.transforms import (
    AugmentImages,
    Compose,
    Group,
    Normalize,
    RandomDropCamera,
    ResizeImages,
    SelectCameras,
    Tokenize,
    Unnormalize,
)

__all__ = ["DataInfo", "auto_packed_layout", "dataset_dir", "first_fit_rows", "fit_packed_layout", "make_source",
           "make_transform", "packed_rows",
           "packing_groups", "make_loader", "mix_aux_frames"]


@dataclasses.dataclass(frozen=True)
class DataInfo:
    """What the trainer and evaluator need to know about the data."""

    root: str
    cameras: tuple[str, ...]  # cameras fed to the model (sorted)
    spec: PrefixSpec
    norm: dict[str, NormStats]  # 'actions', 'state'
    slots: int  # samples per global batch (at most, in packed mode)
    rows: int  # prefix rows per global batch
    row_len: int  # tokens per row
    tasks: tuple[str, ...]  # instructions by task_index
    groups: int  # packing groups per global batch (pass to gather_prefix)
    transforms: Group  # inputs: the per-sample pipeline; outputs: model actions -> robot actions
    delta_mask: tuple[bool, ...] = ()  # pi families: DeltaActions on these action dims (vlajax.data.openpi)


def dataset_dir(cfg: TrainConfig) -> str:
    return cfg.data.dataset_dir or os.path.join(cfg.output_dir, "demos")


def make_source(cfg: TrainConfig, data: LeRobotData | None = None) -> ActionChunkSource:
    """The dataset as action chunks of `model.action_horizon`, checked against the model."""
    data = LeRobotData(dataset_dir(cfg)) if data is None else data
    src = ActionChunkSource(data, cfg.model.action_horizon)
    if openpi.is_pi(cfg.model):  # pi families: actions and state zero-padded to the model's dims
        openpi.check_source(cfg, src)
        return src
    info = os.path.join(data.root, "meta", "info.json")
    if src.action_dim != cfg.model.action_dim:
        raise DatasetError(f"{info}: actions have {src.action_dim} dims, model.action_dim={cfg.model.action_dim}")
    if src.state_dim > cfg.model.state_dim:
        raise DatasetError(f"{info}: state has {src.state_dim} dims > model.state_dim={cfg.model.state_dim}")
    if cfg.model.aux_target != "none":  # every record also carries its episode's target
        aux, before, start = grasp_place_targets(src)
        weight = {"grasp_place_pregrasp": before, "grasp_place_start": start}.get(cfg.model.aux_target)
        if cfg.model.aux_target == "grasp_place" and cfg.sft.aux_start_weight != 1.0:  # start frames weigh more
            weight = np.where(start, np.float32(cfg.sft.aux_start_weight), np.float32(1.0))
        src = ActionChunkSource(data, cfg.model.action_horizon, aux=aux, aux_frame_weight=weight)
    return src


def _cameras(cfg: TrainConfig, src: ActionChunkSource) -> tuple[str, ...]:
    unknown = [c for c in cfg.data.drop_cameras if c not in src.cameras]
    if unknown:
        raise DatasetError(f"{src.data.root}/meta/info.json: data.drop_cameras {unknown} are not in the dataset "
                           f"(cameras: {list(src.cameras)})")
    cams = tuple(sorted(c for c in src.cameras if c not in cfg.data.drop_cameras))
    if len(cams) > cfg.model.num_cameras:
        raise DatasetError(f"{src.data.root}/meta/info.json: {len(cams)} cameras {cams} > model.num_cameras="
                           f"{cfg.model.num_cameras}; drop some with data.drop_cameras")
    return cams


def make_transform(cfg: TrainConfig, cameras: tuple[str, ...], norm: dict[str, NormStats], *,
                   train: bool = True, delta_mask: tuple[bool, ...] = ()) -> Group:
    """inputs: select cameras, resize, (camera dropout, augment), tokenize, normalize; outputs: unnormalize.
    pi families: `vlajax.data.openpi.make_transform` (openpi's steps and order; `delta_mask`: its
    DeltaActions before normalizing, for a policy trained on delta actions)."""
    if openpi.is_pi(cfg.model):
        return openpi.make_transform(cfg, cameras, norm, train=train, delta_mask=delta_mask)
    if any(delta_mask):
        raise ValueError(f"delta_mask is an openpi data transform; model.family={cfg.model.family!r}")
    steps = [SelectCameras(keep=cameras), ResizeImages(cfg.model.image_size)]
    if train and cfg.data.camera_dropout > 0:  # never the first camera: every sample keeps one
        p = cfg.data.camera_dropout
        steps += [RandomDropCamera(c, p, seed=cfg.seed + 1 + k) for k, c in enumerate(cameras[1:])]
    if train and cfg.data.augment:
        steps.append(AugmentImages(seed=cfg.seed))
    mode = action_norm(cfg)
    steps += [Tokenize(cfg.model.max_text_len), Normalize(norm, cfg.data.state_norm, mode)]
    return Group(tuple(steps), (Unnormalize(norm, cfg.data.state_norm, mode),))


def packed_rows(mean_tokens: float, slots: int, row_len: int, multiple: int) -> int:
    """Rows so that `slots` samples of `mean_tokens` fit with 5% slack, rounded up to `multiple`."""
    rows = math.ceil(1.05 * slots * mean_tokens / row_len)
    return max(multiple, -(-rows // multiple) * multiple)


def auto_packed_layout(mean_tokens: float, slots: int, prefix_len: int, multiple: int) -> tuple[int, int]:
    """(rows, row_len) when neither is configured: rows of 2 x or 1 x `prefix_len`, whichever carries
    fewer tokens for `slots` samples of `mean_tokens` (ties: 2 x, which packs better)."""
    return min(((packed_rows(mean_tokens, slots, t, multiple), t) for t in (2 * prefix_len, prefix_len)),
               key=lambda rt: (rt[0] * rt[1], -rt[1]))


def first_fit_rows(lengths: Sequence[int], row_len: int, max_segments: int = 0) -> int:
    """Rows of `row_len` tokens that first-fit in arrival order (what `PackedBatchDataset` does, at most
    `max_segments` samples per row; 0 = no limit) opens for samples of `lengths` tokens."""
    fill: list[int] = []
    segs: list[int] = []
    for k in lengths:
        for r, f in enumerate(fill):
            if f + k <= row_len and (not max_segments or segs[r] < max_segments):
                fill[r] += k
                segs[r] += 1
                break
        else:
            fill.append(int(k))
            segs.append(1)
    return len(fill)


def fit_packed_layout(lengths: Sequence[int], slots: int, min_row_len: int, multiple: int, *,
                      step: int = 8, max_segments: int = 0, row_lens: Sequence[int] = (), batches: int = 32,
                      seed: int = 0) -> tuple[int, int]:
    """(rows, row_len) sized by samples and tokens: the layout whose batches carry all `slots` samples in
    the fewest tokens.

    `lengths`: prefix tokens of sampled records. For each candidate row length T (`row_lens`, else
    `min_row_len` -- the longest possible prefix -- to 2 x it in steps of `step`), `batches` batches of
    `slots` lengths drawn from `lengths` are first-fit into rows of T as the packer does; R(T) = the
    most rows any of them needed, rounded up to `multiple`, so a batch is not cut short by its rows
    (a cut batch carries fewer samples per step in the same tokens). -> the T with the fewest R x T
    tokens; within 2% of the fewest, the shortest T (attention per row grows with T)."""
    lengths = np.asarray(lengths, np.int64)
    if lengths.size == 0 or slots < 1:
        raise ValueError("fit_packed_layout needs sampled lengths and slots >= 1")
    draws = np.random.default_rng(seed).choice(lengths, (batches, slots))
    cands = tuple(row_lens) or tuple(range(min_row_len, 2 * min_row_len + 1, step))
    layouts = []
    for t in cands:
        if t < int(lengths.max()):
            continue
        need = max(first_fit_rows(b, t, max_segments) for b in draws)
        r = max(multiple, -(-need // multiple) * multiple)
        layouts.append((r * t, t, r))
    if not layouts:
        raise ValueError(f"no row length in {cands[0]}..{cands[-1]} holds a sample of {int(lengths.max())} tokens")
    best = min(tok for tok, _, _ in layouts)
    _, t, r = min((lay for lay in layouts if lay[0] <= 1.02 * best), key=lambda lay: lay[1])
    return r, t


def packing_groups(slots: int, shards: int, min_slots: int = 8) -> int:
    """Packing groups for one process: one per data shard (device) when each still gets
    `min_slots` samples, so that `gather_prefix` compiles without collectives; else 1 (a group
    spanning several devices gains no locality, XLA all-gathers either way, and packs worse)."""
    return shards if shards > 1 and slots % shards == 0 and slots // shards >= min_slots else 1


def mix_aux_frames(cfg: TrainConfig, src: ActionChunkSource, frames: dict) -> MixedSource:
    """`src` with `data.grounding_fraction` of aux-only records from `frames` (`vlajax.data.demos.grounding_frames`):
    grasp target = the named cube's xy, place target = the square's, normalized like `src`'s own
    `grasp_place` targets; aux weight `sft.aux_start_weight` (they are start frames: gripper at home)."""
    if cfg.model.aux_target != "grasp_place":
        raise DatasetError("data.grounding_fraction needs model.aux_target='grasp_place', "
                           f"got {cfg.model.aux_target!r}")
    raw, _, _ = grasp_place_raw(src)
    target = grasp_place_frame_targets(raw, frames["cubes"][:, 0], frames["zone"])
    extra = AuxFrameSource(frames["images"], frames["state"], frames["instructions"], target,
                           cfg.sft.aux_start_weight, horizon=src.horizon, action_dim=src.action_dim)
    return MixedSource(src, extra, cfg.data.grounding_fraction)


def make_loader(cfg: TrainConfig, mesh: jax.sharding.Mesh | None, *, num_epochs: int | None = None,
                train: bool = True, aux_frames: Callable[[], dict] | None = None,
                delta_mask: tuple[bool, ...] = (), delta_from: str = "delta_mask",
                openpi_stats: bool = False) -> tuple[Loader, DataInfo]:
    """This process's loader of global batches over `mesh` (None: process-local numpy).

    `delta_mask` (pi families; the policy being fine-tuned was trained on delta actions): openpi's
    DeltaActions on those dims before normalizing, whose action statistics are then the delta actions'
    (`vlajax.data.openpi.delta_action_stats`); a dataset it cannot apply to is a ConfigError naming
    `delta_from` (where the mask came from). `openpi_stats` (fine-tuning an imported openpi policy):
    the statistics are computed from the frames as openpi's `compute_norm_stats` computes them
    (`vlajax.data.openpi.openpi_norm_stats`, after DeltaActions), not read from `meta/stats.json`.

    `aux_frames` (with `data.grounding_fraction` > 0): a function returning the frames
    (`vlajax.data.demos.grounding_frames`' output), called only once the dataset passed its checks; they
    are mixed into the records as aux-only samples (`mix_aux_frames`)."""
    src = make_source(cfg)
    delta_mask = tuple(delta_mask) if any(delta_mask) else ()
    openpi.check_delta(cfg, src, delta_mask, delta_from)
    cams = _cameras(cfg, src)
    # decode only the cameras used
    src = ActionChunkSource(src.data, cfg.model.action_horizon, cameras=cams, aux=src.aux,
                            aux_frame_weight=src.aux_frame_weight)
    records = src if aux_frames is None else mix_aux_frames(cfg, src, aux_frames())
    if openpi_stats:  # fine-tuning an imported openpi policy: the stats openpi's compute_norm_stats would write
        norm = openpi.openpi_norm_stats(src, delta_mask, cfg.data.batch_size)
    else:
        stats = load_norm_stats(src.data.root, (src.action_key, src.state_key),
                                dims={src.action_key: src.action_dim, src.state_key: src.state_dim})
        norm = {"actions": stats[src.action_key], "state": stats[src.state_key]}
        if delta_mask:  # the targets are delta actions on the masked dims: so are their statistics
            norm["actions"] = openpi.delta_action_stats(src, delta_mask, norm["actions"])
    spec = openpi.prefix_spec(cfg.model) if openpi.is_pi(cfg.model) else PrefixSpec.from_model(cfg.model, cams)
    group = make_transform(cfg, cams, norm, train=train, delta_mask=delta_mask)
    transform = Compose(group.inputs)
    pc = jax.process_count()
    d = cfg.data
    dp = mesh.shape["dp"] if mesh is not None else 1
    if d.batch_size % pc:
        raise ValueError(f"data.batch_size={d.batch_size} is not divisible by {pc} processes")
    row_len = d.pack_row_len or 2 * spec.length
    rows = d.pack_rows
    groups = packing_groups(d.batch_size // pc, dp // pc if dp % pc == 0 else 1) if d.batching == "packed" else 1
    if d.batching == "packed" and rows == 0:
        # sized by samples and tokens: first-fit of one packing group's slots, drawn from the prefix lengths
        # of 256 records, into rows of each candidate length (fit_packed_layout); all groups alike
        n = min(len(src), 256)
        picks = np.random.default_rng(cfg.data.shuffle_seed).choice(len(src), n, replace=False)
        lengths = [spec.num_tokens(transform(src[int(i)])) for i in picks]
        per_group, unit = groups * pc, math.lcm(dp, pc, groups * pc)  # total rows: a multiple of unit
        rows_g, row_len = fit_packed_layout(lengths, d.batch_size // per_group, spec.length,
                                            unit // math.gcd(unit, per_group),
                                            step=max(spec.seq_multiple, 8), max_segments=d.max_segments_per_row,
                                            row_lens=(d.pack_row_len,) if d.pack_row_len else (),
                                            seed=cfg.data.shuffle_seed)
        rows = rows_g * per_group
    if d.batching == "packed" and rows % math.lcm(dp, pc):
        raise ValueError(f"data.pack_rows={rows} is not divisible by mesh dp={dp} and {pc} processes")
    if d.batching == "dynamic" and pc > 1:
        raise ValueError("data.batching='dynamic' needs one process (each process would pick its own padded "
                         "length, and a global array needs one); use 'packed' or 'fixed' across hosts")
    if d.batching == "packed" and (rows // pc) % groups:
        raise ValueError(f"data.pack_rows={rows} is not divisible by {groups * pc} packing groups")
    ds = make_dataset(records, transform, spec, d.batching, d.batch_size // pc, seed=d.shuffle_seed,
                      rows=rows // pc if d.batching == "packed" else 0, row_len=row_len,
                      max_segments=d.max_segments_per_row, num_epochs=num_epochs, num_threads=d.num_threads,
                      groups=groups)
    loader = Loader(ds, mesh, prefetch=d.prefetch)
    info = DataInfo(src.data.root, cams, spec, norm, d.batch_size,
                    rows if d.batching == "packed" else d.batch_size,
                    row_len if d.batching == "packed" else spec.length, tuple(src.data.tasks), groups * pc,
                    group, delta_mask)
    return loader, info
