"""Block-wise FP8 post-training quantization of the language tower (the vision tower is untouched).

Each weight matrix of `params/llm`, `params/expert` and the text embedding is viewed as 2-D
[in, out] (attention q/k/v and gate_up: [embed, heads*head_dim]; o: [heads*head_dim, embed]),
cut into 128 x 128 blocks (edge blocks may be smaller), and stored as float8_e4m3fn with one
float32 scale per block: `scale = max|w_block| / 448`, `q = round_to_e4m3(w / scale)`.
Everything else (vision tower, norms, biases, small projections) keeps its dtype.

    qparams = quantize_params(params)           # pytree with QTensor leaves
    params_hat = dequantize_params(qparams)     # call inside the jitted step: FP8 stays in memory
    nbytes(qparams), nbytes(params)             # storage in bytes
"""

from __future__ import annotations

import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

BLOCK = 128
FP8 = jnp.float8_e4m3fn
FP8_MAX = float(jnp.finfo(FP8).max)  # 448
LANGUAGE_TOWER = ("llm", "expert", "embed")  # top-level parameter groups that are quantized
_IN_FIRST = ("q", "k", "v", "gate_up")  # 3-D kernels [in, a, b]; other 3-D kernels are [a, b, out]


@flax.struct.dataclass
class QTensor:
    """An FP8 block-quantized tensor: q [R, C] e4m3, scale f32 [ceil(R/128), ceil(C/128)]."""

    q: jax.Array
    scale: jax.Array
    shape: tuple[int, ...] = flax.struct.field(pytree_node=False)
    dtype: Any = flax.struct.field(pytree_node=False)


def _as_2d(path: tuple[str, ...], shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 2:
        return shape
    if len(path) >= 2 and path[-2] in _IN_FIRST:
        return shape[0], math.prod(shape[1:])
    return math.prod(shape[:-1]), shape[-1]


def _pad_blocks(w: jax.Array) -> jax.Array:
    r, c = w.shape
    return jnp.pad(w, ((0, -r % BLOCK), (0, -c % BLOCK)))


def quantize_tensor(w: jax.Array, shape2d: tuple[int, int]) -> QTensor:
    """Quantize `w` (any shape) viewed as `shape2d` into 128x128 e4m3 blocks with fp32 scales."""
    w2 = _pad_blocks(w.reshape(shape2d).astype(jnp.float32))
    rb, cb = w2.shape[0] // BLOCK, w2.shape[1] // BLOCK
    blocks = w2.reshape(rb, BLOCK, cb, BLOCK)
    amax = jnp.max(jnp.abs(blocks), axis=(1, 3))
    scale = jnp.where(amax > 0, amax / FP8_MAX, 1.0).astype(jnp.float32)
    q = (blocks / scale[:, None, :, None]).astype(FP8).reshape(w2.shape)[: shape2d[0], : shape2d[1]]
    return QTensor(q, scale, tuple(w.shape), w.dtype)


def dequantize_tensor(t: QTensor) -> jax.Array:
    """Back to the original shape and dtype (fp8 values times their block's scale)."""
    r, c = t.q.shape
    s = jnp.repeat(jnp.repeat(t.scale, BLOCK, axis=0)[:r], BLOCK, axis=1)[:, :c]
    return (t.q.astype(jnp.float32) * s).reshape(t.shape).astype(t.dtype)


def _is_target(path: tuple[str, ...], x) -> bool:
    return bool(path) and path[0] in LANGUAGE_TOWER and getattr(x, "ndim", 0) >= 2


def _keys(path) -> tuple[str, ...]:
    return tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def quantize_params(params: dict) -> dict:
    """`params` (the 'params' collection) with language-tower matrices replaced by QTensors."""

    def one(path, x):
        keys = _keys(path)
        return quantize_tensor(x, _as_2d(keys, x.shape)) if _is_target(keys, x) else x

    return jax.tree_util.tree_map_with_path(one, params)


def dequantize_params(qparams: dict) -> dict:
    """Inverse of `quantize_params` (lossy); use inside jit so FP8 weights are what is stored."""
    return jax.tree.map(lambda x: dequantize_tensor(x) if isinstance(x, QTensor) else x, qparams,
                        is_leaf=lambda x: isinstance(x, QTensor))


def nbytes(tree: Any, group: str | None = None) -> int:
    """Storage bytes of a (possibly quantized) params tree, optionally of one top-level group only."""
    if group is not None:
        tree = {k: v for k, v in tree.items() if k == group}
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def tower_bytes(tree: dict) -> dict[str, int]:
    """Bytes of the language tower (quantized groups), the vision tower, the rest and the total."""
    lang = sum(nbytes(tree, g) for g in LANGUAGE_TOWER if g in tree)
    vision = nbytes(tree, "vision") if "vision" in tree else 0
    total = nbytes(tree)
    return {"language": lang, "vision": vision, "other": total - lang - vision, "total": total}
