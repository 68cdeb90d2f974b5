"""The π0 / π0.5 steps of a policy's transform list (`vlajax.policies.transforms`): openpi's input layout.

Training (`vlajax.data.openpi`) and the policy build the same inputs:

  images    env `pixels/<camera>` uint8 [B, h, w, 3] resized with pad to `model.image_size`
            (aspect kept, black borders) with PIL's bilinear filter in integer arithmetic, the
            uint8 values of openpi's `ResizeImages` and of our data pipeline, -> float32 [0, 1],
            renamed to openpi's slot by the camera map; a slot no camera maps to (or an absent
            optional camera) is black with mask False.
  text      π0: the SentencePiece prompt of the task's instruction (a table lookup); π0.5: the
            prompt with the normalized state discretized into it, composed per step by
            `vlajax.models.sp_tokenizer.StatePromptTable` (jit-able; equal to the host tokenizer,
            see its docstring for where the two could differ).
  state     normalized (first dims: the dataset's), zero-padded to `model.state_dim`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.data.openpi import check_vocab, load_tokenizer, state_in_prompt
from vlajax.models.sp_tokenizer import StatePromptTable
from vlajax.policies.transforms import given_tokens
from vlajax.shared.resize_pad import pad_layout
from vlajax.shared.robots import INSTRUCTION_ID, PROMPT, STATE, TOKEN_MASK, TOKENS, image_key

__all__ = ["PiPrompts", "PromptTokens", "SlotImages", "TokenizePrompt", "resize_uint8_with_pad", "resize_with_pad"]


def _with_pad(img: jax.Array, size: int, resize) -> jax.Array:
    """[B, h, w, C] -> [B, size, size, C]: `resize(img, rh, rw)` -> [B, rh, rw, C] on `pad_layout`'s size,
    zero-padded to the centre (the one layout of every path, `vlajax.shared.resize_pad`)."""
    rh, rw, top, left = pad_layout(img.shape[1], img.shape[2], size, size)
    return jnp.pad(resize(img, rh, rw), ((0, 0), (top, size - rh - top), (left, size - rw - left), (0, 0)))


def _jax_bilinear(img: jax.Array, rh: int, rw: int) -> jax.Array:
    return jax.image.resize(img, (img.shape[0], rh, rw, img.shape[3]), "bilinear")


def resize_with_pad(img: jax.Array, size: int) -> jax.Array:
    """float [B, h, w, 3] -> [B, size, size, 3]: bilinear resize keeping the aspect ratio,
    centred, zero (black) borders (openpi's `image_tools.resize_with_pad`)."""
    if img.shape[1:3] == (size, size):
        return img
    return _with_pad(img, size, _jax_bilinear)


def resize_uint8_with_pad(img, size: int) -> jax.Array:
    """uint8 [B, h, w, 3] -> float32 [B, size, size, 3] in [0, 1]: resized keeping the aspect ratio
    with PIL's bilinear filter in integer arithmetic (`pil_resize`: the uint8 values openpi's
    `ResizeImages` -- `openpi_client.image_tools.resize_with_pad` -- and our data pipeline's
    `vlajax.shared.resize_pad.resize_with_pad` compute), centred on black; an image already at `size`
    is only scaled."""
    img = jnp.asarray(img)
    if img.shape[1:3] != (size, size):
        img = _with_pad(img, size, pil_resize)
    return img.astype(jnp.float32) / 255.0


class PiPrompts:
    """One π policy's prompt tokenizer and its tables, built once (`SlotImages`' sibling steps share it).

    model: `ModelConfig` (family 'pi0' | 'pi05'); instructions: per task, its instruction strings;
    state_dims: the normalized state's width (π0.5 with the state in its prompt).
    """

    def __init__(self, model, instructions: list[list[str]], state_dims: int):
        tok = check_vocab(load_tokenizer(model.tokenizer_path, model.max_text_len), model)
        self.tok = tok
        n = max(len(t) for t in instructions)
        flat = [p for t in instructions for p in t]
        index = np.zeros((len(instructions), n), np.int32)  # (task, instruction) -> row of `flat`
        k = 0
        for i, t in enumerate(instructions):
            index[i, : len(t)] = np.arange(k, k + len(t))
            k += len(t)
        self.index = index
        self.table = None
        if state_in_prompt(model):
            self.table = StatePromptTable.build(tok, flat, state_dim=state_dims)
        else:
            self.ids, self.mask = tok.batch_pi0(flat)

    def encode(self, texts: list[str], state=None) -> tuple[np.ndarray, np.ndarray]:
        """Host prompts [B] (and the normalized, unpadded state [B, S] when the prompt carries it)
        -> ids int32 [B, max_text_len], mask bool [B, max_text_len] (openpi's TokenizePrompt)."""
        if self.table is not None:
            pairs = [self.tok.pi05(t, s) for t, s in zip(texts, np.asarray(state), strict=True)]
        else:
            pairs = [self.tok.pi0(t) for t in texts]
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])

    def tokens(self, task_id, instruction_id, state) -> tuple[jax.Array, jax.Array]:
        """Prompt ids int32 [B, L] and mask bool [B, L]; state: normalized, unpadded [B, S] (π0.5)."""
        row = jnp.asarray(self.index)[jnp.asarray(task_id, jnp.int32), jnp.asarray(instruction_id, jnp.int32)]
        if self.table is not None:
            return self.table.tokens(row, state)
        return jnp.asarray(self.ids)[row], jnp.asarray(self.mask)[row]


@dataclasses.dataclass(frozen=True)
class SlotImages:
    """'pixels/<camera>' -> 'images' {slot: float32 [B, size, size, 3] in [0, 1]}, 'image_masks'
    {slot: bool [B]} for every slot of `slots`: each camera resized with pad (uint8 images with PIL's
    integer bilinear filter, openpi's ResizeImages) into its slot (`camera_map`); a slot no camera maps to,
    or an absent `optional` camera's, is black with mask False."""

    cameras: tuple[str, ...]
    camera_map: tuple[tuple[str, str], ...]
    slots: tuple[str, ...]
    size: int
    optional: tuple[str, ...] = ()

    def __post_init__(self):
        missing = [c for c in self.cameras if c not in dict(self.camera_map)]
        if missing:
            raise ValueError(f"cameras {missing} have no openpi slot in the camera map {dict(self.camera_map)}")

    def __call__(self, data):
        n, b, slot = self.size, data[STATE].shape[0], dict(self.camera_map)
        images, masks = {}, {}
        for c in self.cameras:
            key = image_key(c)
            if key not in data:
                if c in self.optional:
                    continue
                raise KeyError(f"the policy reads camera {c!r} but the env observation has {sorted(data)}")
            img = jnp.asarray(data[key])
            img = resize_uint8_with_pad(img, n) if img.dtype == jnp.uint8 else resize_with_pad(
                img.astype(jnp.float32) / 255.0, n)
            images[slot[c]], masks[slot[c]] = img, jnp.ones((b,), bool)
        for s in self.slots:
            if s not in images:
                images[s], masks[s] = jnp.zeros((b, n, n, 3), jnp.float32), jnp.zeros((b,), bool)
        return {**data, "images": images, "image_masks": masks}


@dataclasses.dataclass(frozen=True, eq=False)
class PromptTokens:
    """Without 'tokens' in the data: the SentencePiece prompt of ('task_id', 'instruction_id') (π0.5: with
    the normalized 'state' [B, S] discretized into it, composed per step); given ones pass. Runs after
    the state is normalized and before it is padded."""

    prompts: PiPrompts

    def __call__(self, data):
        if TOKENS in data:
            return given_tokens(data)
        b = data[STATE].shape[0]
        task_id = jnp.broadcast_to(jnp.asarray(data.get("task_id"), jnp.int32), (b,))
        tokens, mask = self.prompts.tokens(task_id, data[INSTRUCTION_ID], data[STATE])
        return {**data, TOKENS: tokens, TOKEN_MASK: mask}


@dataclasses.dataclass(frozen=True, eq=False)
class TokenizePrompt:
    """Host: prompts [B] -> SentencePiece 'tokens' / 'token_mask' int32 / bool [B, max_text_len] in openpi's
    format (π0.5 with the state in its prompt: the observation's state through `state_steps`, the policy's
    robot and normalize steps). An empty prompt is refused (no default prompt to take its place)."""

    prompts: PiPrompts
    state_steps: tuple = ()

    def __call__(self, data):
        texts = list(data[PROMPT])
        if not all(texts):
            raise ValueError("the policy needs a prompt (its openpi config has no default prompt)")
        state = None
        if self.prompts.table is not None:
            if set(data) == {PROMPT}:
                raise ValueError("this π0.5 policy puts the state in the prompt: encode_instructions needs the "
                                 "observation (its state)")
            view = data
            for t in self.state_steps:
                view = t(view)
            state = np.asarray(view[STATE])
        tokens, mask = self.prompts.encode(texts, state)
        return {**data, TOKENS: tokens, TOKEN_MASK: mask}


# PIL's bilinear resampling (Pillow's Resample.c), so the jitted path gives the uint8 values openpi's
# `openpi_client.image_tools.resize_with_pad` (PIL) and our data pipeline give.
_PRECISION_BITS = 32 - 8 - 2


def _pil_coeffs(in_size: int, out_size: int) -> np.ndarray:
    """int64 [out, in]: PIL's fixed-point bilinear weights (`precompute_coeffs` + `normalize_coeffs_8bpc`)."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale
    out = np.zeros((out_size, in_size), np.int64)
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        w = np.array([max(0.0, 1.0 - abs((x + xmin - center + 0.5) / filterscale)) for x in range(xmax)])
        total = w.sum()
        if total != 0:
            w = w / total
        k = np.where(w < 0, np.trunc(-0.5 + w * (1 << _PRECISION_BITS)), np.trunc(0.5 + w * (1 << _PRECISION_BITS)))
        out[xx, xmin:xmin + xmax] = k.astype(np.int64)
    return out


def _pil_pass(img: jax.Array, coeffs: np.ndarray, axis: int) -> jax.Array:
    """int32 values [B, h, w, C] resampled along `axis` (1: rows, 2: columns) with PIL's rounding and clip."""
    k = jnp.asarray(coeffs, jnp.int32)
    spec = "oi,bihc->bohc" if axis == 1 else "oi,bhic->bhoc"
    acc = jnp.einsum(spec, k, img, preferred_element_type=jnp.int32) + (1 << (_PRECISION_BITS - 1))
    return jnp.clip(acc >> _PRECISION_BITS, 0, 255)


def pil_resize(img, h: int, w: int) -> jax.Array:
    """uint8 [B, h0, w0, C] -> int32 [B, h, w, C] values in [0, 255]: PIL's `Image.resize((w, h), BILINEAR)`
    (horizontal pass first, each pass rounded to uint8, as Pillow does)."""
    x = jnp.asarray(img).astype(jnp.int32)
    if x.shape[2] != w:
        x = _pil_pass(x, _pil_coeffs(x.shape[2], w), 2)
    if x.shape[1] != h:
        x = _pil_pass(x, _pil_coeffs(x.shape[1], h), 1)
    return x
