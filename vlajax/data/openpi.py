"""The input pipeline of the π0 / π0.5 families (openpi's model transforms, on our samples).

Per-sample steps (`make_transform`), in openpi's order:

    select cameras -> rename them to openpi's image slots (`data.camera_map`) -> resize with pad
    to `model.image_size` -> (augment) -> [DeltaActions on `delta_mask`] -> normalize state /
    actions with the dataset's stats -> tokenize (π0: the prompt; π0.5: the prompt and the
    normalized state, discretized, before padding) -> zero-pad state to `model.state_dim` and
    actions to `model.action_dim`

DeltaActions (openpi's `transforms.DeltaActions`, a data transform: after the robot inputs,
before Normalize): on the masked action dims every step of the chunk minus the sample's state
(the chunk's first frame), `actions[:, :n] -= where(mask, state[:n], 0)`. It applies only when
the policy being fine-tuned was trained so (an imported openpi policy whose config has a delta
mask, e.g. `pi0_libero`'s `extra_delta_transform=True`: `vlajax.sft.init_from.delta_transforms`);
its action statistics on the masked dims are then those of the delta actions
(`delta_action_stats`), as openpi's `compute_norm_stats` runs the data transforms first. The
outputs undo it (`AbsoluteActions`, with the sample's state) after Unnormalize; the policy does
the same at serving time (`vlajax.config.openpi.OpenpiTransforms.robot_actions`).

A π model has openpi's three slots (`model.num_cameras` = 3; fewer keeps the first ones, for
CPU tests). A slot no camera maps to is filled by the collator with a black image and mask False (openpi
feeds zeros with a False mask for a missing wrist camera). The prefix layout (`prefix_spec`)
is the slots' patches then the text; π families batch with `data.batching='fixed'` only.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import numpy as np

from vlajax.config.openpi import delta_shift
from vlajax.config.schema import ConfigError, TrainConfig, action_norm
from vlajax.data.lerobot import DatasetError
from vlajax.data.normalize import NormStats
from vlajax.data.packing import PrefixSpec
from vlajax.data.source import ActionChunkSource
from vlajax.data.stats import RunningStats
from vlajax.data.transforms import (
    AugmentImages,
    Group,
    Normalize,
    PadStateActions,
    RenameCameras,
    ResizeWithPad,
    SelectCameras,
    Unnormalize,
)
from vlajax.models.sp_tokenizer import PromptTokenizer

__all__ = ["SLOTS", "model_slots", "is_pi", "state_in_prompt", "camera_map", "prefix_spec", "check_source",
           "make_transform", "TokenizePi", "load_tokenizer", "check_vocab", "DeltaActions", "AbsoluteActions",
           "check_delta", "delta_action_stats", "openpi_norm_stats"]

SLOTS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")  # openpi's image keys (sorted = its order)


def is_pi(model_cfg) -> bool:
    return getattr(model_cfg, "family", "vla") != "vla"


def state_in_prompt(model_cfg) -> bool:
    """π0.5 with `model.discrete_state_input`: the prompt carries the discretized state."""
    return model_cfg.family == "pi05" and model_cfg.discrete_state_input


def model_slots(model_cfg) -> tuple[str, ...]:
    """The image slots of a π model: openpi's three, or its first `model.num_cameras` (CPU tests)."""
    return SLOTS[: model_cfg.num_cameras]


def camera_map(entries: tuple[str, ...], cameras: tuple[str, ...],
               slots: tuple[str, ...] = SLOTS) -> tuple[tuple[str, str], ...]:
    """`data.camera_map` entries 'ours=slot' -> ((camera, slot), ...) for `cameras`; ConfigError
    for a malformed entry, an unknown slot, two cameras on one slot or a camera without a slot."""
    pairs = {}
    for e in entries:
        ours, sep, slot = e.partition("=")
        if not sep or not ours:
            raise ConfigError(f"data.camera_map entry {e!r} must be 'camera=slot' with slot in {slots}")
        pairs[ours] = slot
    missing = [c for c in cameras if c not in pairs]
    if missing:
        raise ConfigError(f"cameras {missing} have no entry in data.camera_map {entries} (slots: {slots})")
    for c in cameras:
        if pairs[c] not in slots:
            raise ConfigError(f"data.camera_map puts {c!r} on {pairs[c]!r}, not one of the model's slots {slots} "
                              "(model.num_cameras keeps openpi's first slots)")
    used = [pairs[c] for c in cameras]
    if len(set(used)) != len(used):
        raise ConfigError(f"data.camera_map puts two of the cameras {cameras} on one slot: {entries}")
    return tuple((c, pairs[c]) for c in cameras)


def prefix_spec(model_cfg) -> PrefixSpec:
    """The π prefix layout: every slot's patches, then `max_text_len` text tokens, no state token."""
    patch = model_cfg.siglip["patch"]
    m = model_cfg
    return PrefixSpec(model_slots(m), m.image_size, (m.image_size // patch) ** 2, m.max_text_len, False,
                      m.prefix_len, m.seq_multiple)


def check_source(cfg: TrainConfig, src: ActionChunkSource) -> None:
    """Actions and state must fit the model's padded dims (they are zero-padded, never cut)."""
    info = os.path.join(src.data.root, "meta", "info.json")
    m = cfg.model
    if src.action_dim > m.action_dim:
        raise DatasetError(f"{info}: actions have {src.action_dim} dims > model.action_dim={m.action_dim}")
    if src.state_dim > m.state_dim:
        raise DatasetError(f"{info}: state has {src.state_dim} dims > model.state_dim={m.state_dim}")
    if cfg.data.batching != "fixed":
        raise ConfigError(f"data.batching={cfg.data.batching!r} is not available for model.family="
                          f"{m.family!r} (its prefix is not packed); use --data.batching fixed")


@functools.lru_cache(maxsize=8)
def load_tokenizer(path: str, max_len: int):
    """The SentencePiece prompt tokenizer of `model.tokenizer_path` (cached per path and length)."""
    return PromptTokenizer.load(path, max_len)


def check_vocab(tok, model_cfg):
    """The tokenizer's ids must fit the model's embedding table (ConfigError naming both). -> tok."""
    if tok.vocab_size > model_cfg.vocab_size:
        raise ConfigError(f"model.tokenizer_path={tok.path} has {tok.vocab_size} pieces > model.vocab_size="
                          f"{model_cfg.vocab_size} (its ids would index past the embedding table)")
    return tok


@dataclasses.dataclass(frozen=True)
class TokenizePi:
    """Instruction (+ normalized state for π0.5) -> `tokens` int32 [max_len], `token_mask` bool [max_len]."""

    path: str
    max_len: int
    with_state: bool

    def __call__(self, sample: dict) -> dict:
        tok = load_tokenizer(self.path, self.max_len)
        if self.with_state:
            ids, mask = tok.pi05(sample["instruction"], sample["state"])
        else:
            ids, mask = tok.pi0(sample["instruction"])
        return {**sample, "tokens": ids, "token_mask": mask}


def make_transform(cfg: TrainConfig, cameras: tuple[str, ...], norm: dict[str, NormStats], *,
                   train: bool = True, delta_mask: tuple[bool, ...] = ()) -> Group:
    """inputs: the module docstring's steps; outputs: unnormalize (on the dataset's dims), then
    AbsoluteActions where `delta_mask` has a True dim (`norm['actions']` must then be the delta
    actions' statistics, `delta_action_stats`)."""
    m = cfg.model
    check_vocab(load_tokenizer(m.tokenizer_path, m.max_text_len), m)  # a missing file fails here, before any compile
    steps = [SelectCameras(keep=cameras),
             RenameCameras(camera_map(cfg.data.camera_map, cameras, model_slots(m))),
             ResizeWithPad(m.image_size)]
    if train and cfg.data.augment:
        steps.append(AugmentImages(seed=cfg.seed))
    delta = any(delta_mask)
    if delta:  # openpi: a data transform, so before Normalize (its stats are the deltas')
        steps.append(DeltaActions(tuple(delta_mask)))
    mode = action_norm(cfg)
    steps += [Normalize(norm, cfg.data.state_norm, mode),
              TokenizePi(m.tokenizer_path, m.max_text_len, state_in_prompt(m)),
              PadStateActions(m.state_dim, m.action_dim)]
    dims = (int(np.shape(norm["state"].mean)[-1]), int(np.shape(norm["actions"].mean)[-1]))
    outputs = (CutStateActions(*dims), Unnormalize(norm, cfg.data.state_norm, mode))
    return Group(tuple(steps), outputs + ((AbsoluteActions(tuple(delta_mask)),) if delta else ()))


@dataclasses.dataclass(frozen=True)
class DeltaActions:
    """openpi's `DeltaActions(mask)`: actions [..., H, A] minus the sample's state [..., S] on the
    masked dims of the first n = len(mask) (n <= A, n <= S); the other dims pass unchanged."""

    mask: tuple[bool, ...]
    sign = -1.0  # the state's sign on the masked dims (a class constant, not a field)

    def __call__(self, sample: dict) -> dict:
        if "actions" not in sample or not any(self.mask):
            return sample
        actions = np.array(sample["actions"], np.float32)  # a copy: the source's arrays stay as they are
        n = len(self.mask)
        actions[..., :n] += self.sign * delta_shift(self.mask, sample["state"])
        return {**sample, "actions": actions}


@dataclasses.dataclass(frozen=True)
class AbsoluteActions(DeltaActions):
    """openpi's `AbsoluteActions(mask)`, the inverse of `DeltaActions` (an output transform, numpy): the
    sample's state added back on the masked dims."""

    sign = 1.0


def check_delta(cfg: TrainConfig, src: ActionChunkSource, delta_mask: tuple[bool, ...], where: str) -> None:
    """ConfigError unless DeltaActions on `delta_mask` applies to this model and dataset: a π model,
    state and actions with at least len(mask) dims each (`where` names the mask's origin)."""
    if not any(delta_mask):
        return
    n = len(delta_mask)
    if not is_pi(cfg.model):
        raise ConfigError(f"{where}: DeltaActions on {n} action dims is an openpi data transform; model.family="
                          f"{cfg.model.family!r} has none")
    info = os.path.join(src.data.root, "meta", "info.json")
    short = [f"{k} has {d} dims" for k, d in ((src.state_key, src.state_dim), (src.action_key, src.action_dim))
             if d < n]
    if short:
        raise ConfigError(f"{where}: the policy was trained on delta actions (DeltaActions on mask "
                          f"{list(map(int, delta_mask))}: actions minus the state on those dims) and {info}: "
                          f"{' and '.join(short)} < {n}, so its targets cannot be made so; fine-tune it on its "
                          "robot's data (state and actions of its dims), or pass --sft.delta-actions off to train "
                          "on this dataset's actions as they are (another embodiment)")


def delta_action_stats(src: ActionChunkSource, delta_mask: tuple[bool, ...], base: NormStats, *,
                       max_frames: int = 20_000) -> NormStats:
    """`base` (the dataset's action statistics, float32 [A]) with the masked dims' replaced by those of
    the delta actions: every step of every frame's chunk (as `src` yields it: the last action repeated
    past an episode's end, as LeRobot pads and openpi's `compute_norm_stats` counts) minus the frame's
    state. Frames: all, or `max_frames` evenly spaced ones. Exact mean / std / q01 / q99 (min / max when
    `base` has them) over those steps."""
    n, total = len(delta_mask), len(src)
    frames = np.arange(total) if total <= max_frames else np.linspace(0, total - 1, max_frames).astype(np.int64)
    steps = frames[:, None] + np.arange(src.horizon)[None, :]  # [F, H]
    data = src.data
    all_actions = np.asarray(data.columns[src.action_key], np.float32).reshape(total, -1)
    state = np.asarray(data.columns[src.state_key], np.float32).reshape(total, -1)[frames]
    end = data.episode_to[data.episode_of][frames][:, None]  # exclusive end of each frame's episode
    actions = all_actions[np.minimum(steps, end - 1)][..., :n]  # [F, H, n]
    delta = (actions - delta_shift(delta_mask, state)).reshape(-1, n).astype(np.float64)
    dims = np.flatnonzero(np.asarray(delta_mask, bool))
    out = {}
    for name, value in (("mean", delta.mean(0)), ("std", delta.std(0)), ("q01", np.quantile(delta, 0.01, axis=0)),
                        ("q99", np.quantile(delta, 0.99, axis=0)), ("min", delta.min(0)), ("max", delta.max(0))):
        old = getattr(base, name)
        if old is None:
            continue
        new = np.array(old, np.float32)
        new[dims] = value[dims]
        out[name] = new
    return NormStats(**out)


def openpi_norm_stats(src: ActionChunkSource, delta_mask: tuple[bool, ...] = (), batch_size: int = 32,
                      ) -> dict[str, NormStats]:
    """`{'state', 'actions'}` statistics as openpi's `scripts/compute_norm_stats.py` computes them for a
    LeRobot dataset: its loader's batches of `batch_size` frames in dataset order (no shuffle; the last
    partial batch dropped, as its loader does -- unless the dataset is shorter than one batch, then one
    batch of every frame), each frame's state [S] and action chunk [H, A] (the last action repeated past
    the episode's end, as LeRobot's `delta_timestamps` clamp) after the data transforms -- DeltaActions
    on `delta_mask` -- into one `vlajax.data.stats.RunningStats` per key: mean / std exact, q01 / q99 from
    its histograms, min / max kept. Float32 [S] / [A] each."""
    total = len(src)
    n_batches = total // batch_size
    bounds = [(b * batch_size, (b + 1) * batch_size) for b in range(n_batches)] or [(0, total)]
    data = src.data
    all_actions = np.asarray(data.columns[src.action_key], np.float32).reshape(total, -1)
    all_state = np.asarray(data.columns[src.state_key], np.float32).reshape(total, -1)
    end = data.episode_to[data.episode_of]  # [N] exclusive end of each frame's episode
    stats = {"state": RunningStats(), "actions": RunningStats()}
    for a, b in bounds:
        frames = np.arange(a, b)
        steps = np.minimum(frames[:, None] + np.arange(src.horizon)[None, :], end[frames][:, None] - 1)
        state, actions = all_state[frames], all_actions[steps]  # [B, S], [B, H, A]
        if any(delta_mask):
            actions = actions.copy()
            actions[..., : len(delta_mask)] -= delta_shift(delta_mask, state).astype(np.float32)
        stats["state"].update(state)
        stats["actions"].update(actions)
    out = {}
    for key, rs in stats.items():
        mean, std, q01, q99, lo, hi = (np.asarray(v, np.float32) for v in rs.finish())
        out[key] = NormStats(mean, std, q01, q99, lo, hi)
    return out


@dataclasses.dataclass(frozen=True)
class CutStateActions:
    """Inverse of `PadStateActions`: the first `state_dim` / `action_dim` dims (model -> dataset)."""

    state_dim: int
    action_dim: int

    def __call__(self, sample: dict) -> dict:
        out = dict(sample)
        for key, dim in (("state", self.state_dim), ("actions", self.action_dim)):
            if key in sample:
                out[key] = sample[key][..., :dim]
        return out
