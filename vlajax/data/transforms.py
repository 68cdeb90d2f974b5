"""Small composable transforms over training samples (dicts from `ActionChunkSource`).

Every transform is a frozen dataclass implementing `DataTransformFn`: `sample -> sample`,
pure and deterministic. Random ones draw from `np.random.default_rng([seed, sample["index"]])`,
so a record always gets the same augmentation and iterator checkpoints stay a few integers.

    SelectCameras(keep=..., drop=...)  remove cameras; a removed camera has no tokens at all
    RandomDropCamera(camera, p, seed)  remove a camera from a fraction p of samples
    ResizeImages(size)                 uint8 [h, w, 3] -> uint8 [size, size, 3] (bilinear)
    ResizeWithPad(size)                same, aspect ratio kept, centred on black (openpi's resize_with_pad)
    RenameCameras(mapping)             camera names -> the model's image slots (openpi: base_0_rgb, ...)
    PadStateActions(state_dim, action_dim)  zero-pad state [S] and actions [H, A] (openpi's action_dim)
    AugmentImages(seed, ...)           random crop (resized back) + brightness/contrast jitter
    Tokenize(max_len)                  instruction -> tokens int32 [max_len], token_mask bool [max_len]
    Normalize(stats, mode)             state / actions into the normalized space
    Unnormalize(stats, mode)           its inverse (an output transform: model actions -> robot)
    Compose(transforms)                apply in order
    Group(inputs, outputs)             a model's input and output transforms, kept together
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

import numpy as np

from vlajax.data.normalize import Mode, NormStats, normalize, unnormalize
from vlajax.models import tokenizer
from vlajax.shared.resize_pad import resize_with_pad

__all__ = [
    "DataTransformFn", "Compose", "SelectCameras", "RandomDropCamera", "ResizeImages", "AugmentImages",
    "Tokenize", "Normalize", "Unnormalize", "Group", "ResizeWithPad", "RenameCameras", "PadStateActions",
]


class DataTransformFn(Protocol):
    def __call__(self, sample: dict) -> dict: ...


def _rng(seed: int, sample: dict) -> np.random.Generator:
    return np.random.default_rng([seed, int(sample["index"])])


def _with_images(sample: dict, images: dict) -> dict:
    return {**sample, "images": images}


@dataclasses.dataclass(frozen=True)
class Compose:
    transforms: tuple[DataTransformFn, ...] = ()

    def __call__(self, sample: dict) -> dict:
        for t in self.transforms:
            sample = t(sample)
        return sample


@dataclasses.dataclass(frozen=True)
class SelectCameras:
    """Keep only `keep` (None = all) minus `drop`. Naming a camera the sample lacks is an error."""

    keep: tuple[str, ...] | None = None
    drop: tuple[str, ...] = ()

    def __call__(self, sample: dict) -> dict:
        images = sample["images"]
        unknown = [c for c in (*(self.keep or ()), *self.drop) if c not in images]
        if unknown:
            raise KeyError(f"cameras {unknown} are not in the sample (have {sorted(images)})")
        names = self.keep if self.keep is not None else tuple(images)
        return _with_images(sample, {c: images[c] for c in names if c not in self.drop})


@dataclasses.dataclass(frozen=True)
class RandomDropCamera:
    """Remove `camera` from a fraction `p` of the samples (variable-length prefixes)."""

    camera: str
    p: float = 0.5
    seed: int = 0

    def __call__(self, sample: dict) -> dict:
        if self.camera in sample["images"] and _rng(self.seed, sample).random() < self.p:
            return _with_images(sample, {c: v for c, v in sample["images"].items() if c != self.camera})
        return sample


def _resize(img: np.ndarray, h: int, w: int) -> np.ndarray:
    if img.shape[:2] == (h, w):
        return img
    from PIL import Image

    return np.asarray(Image.fromarray(img).resize((w, h), Image.Resampling.BILINEAR), dtype=np.uint8)


@dataclasses.dataclass(frozen=True)
class ResizeImages:
    size: int

    def __call__(self, sample: dict) -> dict:
        return _with_images(sample, {c: _resize(v, self.size, self.size) for c, v in sample["images"].items()})


@dataclasses.dataclass(frozen=True)
class ResizeWithPad:
    """uint8 [h, w, 3] -> uint8 [size, size, 3] (`vlajax.shared.resize_pad.resize_with_pad`: openpi's, bit for bit)."""

    size: int

    def __call__(self, sample: dict) -> dict:
        return _with_images(sample, {c: resize_with_pad(v, self.size, self.size) for c, v in sample["images"].items()})


@dataclasses.dataclass(frozen=True)
class RenameCameras:
    """Cameras renamed by `mapping` ((ours, model's), ...); a camera without an entry is an error."""

    mapping: tuple[tuple[str, str], ...]

    def __call__(self, sample: dict) -> dict:
        names = dict(self.mapping)
        unknown = [c for c in sample["images"] if c not in names]
        if unknown:
            raise KeyError(f"cameras {unknown} have no image slot in the camera map {dict(self.mapping)}")
        return _with_images(sample, {names[c]: v for c, v in sample["images"].items()})


@dataclasses.dataclass(frozen=True)
class PadStateActions:
    """Zero-pad `state` [S] to `state_dim` and `actions` [H, A] to `action_dim` (never truncates)."""

    state_dim: int
    action_dim: int

    def __call__(self, sample: dict) -> dict:
        out = dict(sample)
        for key, dim in (("state", self.state_dim), ("actions", self.action_dim)):
            if key in sample:
                x = np.asarray(sample[key], np.float32)
                if x.shape[-1] > dim:
                    raise ValueError(f"{key} has {x.shape[-1]} dims > {dim}")
                out[key] = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, dim - x.shape[-1])])
        return out


@dataclasses.dataclass(frozen=True)
class AugmentImages:
    """Random crop of `crop` x the side (resized back) and brightness/contrast jitter, per camera."""

    seed: int = 0
    crop: float = 0.9
    brightness: float = 0.2
    contrast: float = 0.2

    def __call__(self, sample: dict) -> dict:
        rng = _rng(self.seed, sample)
        out = {}
        for c, img in sample["images"].items():
            h, w = img.shape[:2]
            ch, cw = max(1, round(h * self.crop)), max(1, round(w * self.crop))
            y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
            crop = _resize(np.ascontiguousarray(img[y:y + ch, x:x + cw]), h, w).astype(np.float32)
            b = 1.0 + rng.uniform(-self.brightness, self.brightness)
            k = 1.0 + rng.uniform(-self.contrast, self.contrast)
            mean = crop.mean()
            out[c] = np.clip((crop - mean) * k + mean * b, 0, 255).round().astype(np.uint8)
        return _with_images(sample, out)


@dataclasses.dataclass(frozen=True)
class Tokenize:
    """Instruction -> `tokens` int32 [max_len] and `token_mask` bool [max_len].

    `encode(text, max_len) -> (ids, mask)`; default: the packaged tokenizer of `vlajax.models`.
    """

    max_len: int
    encode: Callable[[str, int], tuple[np.ndarray, np.ndarray]] | None = None

    def __call__(self, sample: dict) -> dict:
        encode = self.encode or tokenizer.encode
        ids, mask = encode(sample["instruction"], self.max_len)
        return {**sample, "tokens": np.asarray(ids, np.int32), "token_mask": np.asarray(mask, bool)}


@dataclasses.dataclass(frozen=True)
class Normalize:
    """Normalize `state` and `actions` with the dataset's statistics (keys: 'state', 'actions')."""

    stats: dict[str, NormStats]
    state_mode: Mode = "mean_std"
    action_mode: Mode = "quantile"

    def __call__(self, sample: dict) -> dict:
        out = dict(sample)
        if "state" in self.stats:
            out["state"] = normalize(sample["state"], self.stats["state"], self.state_mode)
        if "actions" in self.stats:
            out["actions"] = normalize(sample["actions"], self.stats["actions"], self.action_mode)
        return out


@dataclasses.dataclass(frozen=True)
class Unnormalize:
    """Inverse of `Normalize` on 'state' / 'actions' (numpy or jax arrays, any leading dims)."""

    stats: dict[str, NormStats]
    state_mode: Mode = "mean_std"
    action_mode: Mode = "quantile"

    def __call__(self, sample: dict) -> dict:
        out = dict(sample)
        if "state" in self.stats and "state" in sample:
            out["state"] = unnormalize(sample["state"], self.stats["state"], self.state_mode)
        if "actions" in self.stats and "actions" in sample:
            out["actions"] = unnormalize(sample["actions"], self.stats["actions"], self.action_mode)
        return out


@dataclasses.dataclass(frozen=True)
class Group:
    """Input transforms (data -> model) and output transforms (model -> robot) of one policy.

    `push` adds inputs after the existing ones and outputs before them, so the outermost
    input step is undone last (openpi's convention).
    """

    inputs: tuple[DataTransformFn, ...] = ()
    outputs: tuple[DataTransformFn, ...] = ()

    def push(self, inputs: tuple[DataTransformFn, ...] = (), outputs: tuple[DataTransformFn, ...] = ()) -> Group:
        return Group((*self.inputs, *inputs), (*outputs, *self.outputs))

    def apply_inputs(self, sample: dict) -> dict:
        return Compose(self.inputs)(sample)

    def apply_outputs(self, sample: dict) -> dict:
        return Compose(self.outputs)(sample)
