"""Per-device memory plan of an SFT step: params, optimizer, EMA, gradients and activations.

Nothing is allocated: the train state comes from `jax.eval_shape` of the SFT init
(`run_files.init_fn`: `build_model(cfg.model)` + `make_optimizer(cfg)` + EMA when
`sft.ema_decay > 0`), sharded by the logical rules (`cfg.mesh.logical_rules`) on an abstract
`(dp, tp, sp)` mesh of `devices` devices (`cfg.mesh` resolved as `sharding.resolve_mesh_shape`
does: `mesh.dp = -1` takes what tp * sp leave). State bytes are exact per leaf (largest shard).

Activations are an analytic count of what the backward pass keeps, per device, for a global
batch `B` (b = B / dp samples per device; token dims over `sp`, heads and MLP over `tp`). Every
transformer tower (SigLIP per image; the Gemma prefix + action-expert streams of the π
families; the VLA's ViT / LLM / expert) is `layers` blocks over `n` tokens of width `w`
(heads H, kv heads K, head dim D, MLP M, gated or not, T keys per query). One block's saved
tensors per token, in the compute dtype unless said:

    block input x, attention-norm out, MLP-norm out, residual after attention:  4w
    q, k, v, attention output:                                                  (2H + 2K) D
    attention logits (float32) and probabilities (compute dtype):               H T (4 + s) bytes
    MLP input projection(s) and activation output:                              (2 if gated else 1) M + M

    model.remat = False:  all `layers` blocks' tensors are live at the start of the backward pass,
                          plus one block's worth of cotangents while that block is differentiated:
                          (layers + 1) x block.
    model.remat = True:   each block keeps only its input x (w per token per layer, the scan carry);
                          the backward pass recomputes one block at a time, so that block's tensors
                          and their cotangents are live on top: layers x n w s + 2 x block.

Plus the towers' inputs (patch embeddings, the prefix embeddings) and the batch itself. Not
counted: XLA's fusion scratch and collective buffers. The compiled checks in
tests/models/test_memory_plan.py bound the error: the whole SFT step of a reduced π0.5 (dummy widths,
8 devices) within 20%, and the activations alone at openpi's real widths (gemma_2b + gemma_300m, SigLIP
So400m/14, depth 2 via `reduced_depth`) within 10% of XLA's temp bytes (measured -1.7% π0, -3.5% π0.5).
"""

from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import numpy as np

from vlajax.config.schema import DP, GEMMA_VARIANTS, MESH_AXES, TrainConfig
from vlajax.data.openpi import is_pi, model_slots
from vlajax.policies.run_files import init_fn
from vlajax.training.sharding import logical_to_mesh_spec, resolve_mesh_shape

_BYTES = {"float32": 4, "bfloat16": 2}


@dataclasses.dataclass(frozen=True)
class Tower:
    """`layers` transformer blocks over `tokens` tokens per sample (see the module docstring)."""

    name: str
    layers: int
    tokens: int  # per sample (per image for a ViT: `per_sample` images)
    width: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    gated: bool
    keys: int  # keys each query attends to
    per_sample: int = 1  # images per sample (ViT towers)


def towers(cfg: TrainConfig) -> list[Tower]:
    """The transformer towers of `cfg.model` whose activations the backward pass keeps."""
    m = cfg.model
    if m.family == "vla":
        vit_tokens = (m.image_size // m.patch_size) ** 2
        return [
            Tower("vit", m.vit_depth, vit_tokens, m.vit_width, m.vit_heads, m.vit_heads,
                  m.vit_width // m.vit_heads, m.vit_mlp_dim, False, vit_tokens, m.num_cameras),
            Tower("llm", m.depth, m.prefix_len, m.width, m.num_heads, m.num_kv_heads, m.head_dim, m.mlp_dim,
                  True, m.prefix_len),
            Tower("expert", m.depth, m.action_len, m.expert_width, m.num_heads, m.num_kv_heads, m.head_dim,
                  m.expert_mlp_dim, True, m.prefix_len + m.action_len),
        ]
    sig = m.siglip
    img = (m.image_size // sig["patch"]) ** 2
    vlm, exp = GEMMA_VARIANTS[m.paligemma_variant], GEMMA_VARIANTS[m.action_expert_variant]
    prefix = m.num_cameras * img + m.max_text_len
    suffix = m.action_horizon + int(m.family == "pi0")  # pi0: the state token
    return [
        Tower("siglip", sig["depth"], img, sig["width"], sig["num_heads"], sig["num_heads"],
              sig["width"] // sig["num_heads"], sig["mlp_dim"], False, img, m.num_cameras),
        Tower("gemma prefix", vlm["depth"], prefix, vlm["width"], vlm["num_heads"], vlm["num_kv_heads"],
              vlm["head_dim"], vlm["mlp_dim"], True, prefix),
        Tower("gemma expert", exp["depth"], suffix, exp["width"], exp["num_heads"], exp["num_kv_heads"],
              exp["head_dim"], exp["mlp_dim"], True, prefix + suffix),
    ]


def reduced_depth(cfg: TrainConfig, depth: int) -> TrainConfig:
    """A π config at the same widths with `depth` Gemma layers (both experts) and `depth` SigLIP blocks.

    Gemma sizes are named variants (`config.GEMMA_VARIANTS`); this registers `<variant>@<depth>`
    copies there (adding keys, never changing one) and points the config at them."""
    m = cfg.model
    if m.family == "vla":
        raise ValueError("reduced_depth is for the pi families (the VLA's depths are fields: model.depth, vit_depth)")
    names = {}
    for field in ("paligemma_variant", "action_expert_variant"):
        base = getattr(m, field).split("@")[0]
        names[field] = f"{base}@{depth}"
        GEMMA_VARIANTS.setdefault(names[field], dict(GEMMA_VARIANTS[base], depth=depth))
    return cfg.replace(model=dataclasses.replace(m, siglip_depth=depth, **names))


def _split(n: int, k: int) -> int:
    """Per-device share of a dim of size n over a mesh axis of size k (replicated if k does not divide)."""
    return n // k if n % k == 0 else n


def activation_bytes(cfg: TrainConfig, batch: int, mesh_shape: tuple[int, int, int]) -> dict[str, int]:
    """Per-device bytes the backward pass keeps, per tower and in total (module docstring)."""
    dp, tp, sp = mesh_shape
    s = _BYTES[cfg.model.dtype]
    b = max(1, batch // dp)
    out: dict[str, int] = {}
    total = 0
    for t in towers(cfg):
        n = b * t.per_sample * _split(t.tokens, sp)  # tokens on this device
        h, k, m = _split(t.heads, tp), _split(t.kv_heads, tp), _split(t.mlp, tp)
        block = n * s * (4 * t.width + (2 * h + 2 * k) * t.head_dim + ((2 if t.gated else 1) + 1) * m)
        block += n * h * t.keys * (4 + s)
        # + one block's cotangents during its backward; remat: only the scan carry is kept per layer,
        # the block being differentiated is recomputed (its tensors live once more)
        tower = t.layers * n * t.width * s + 2 * block if cfg.model.remat else (t.layers + 1) * block
        tower += n * t.width * s  # the tower's input embeddings
        out[t.name] = tower
        total += tower
    m = cfg.model
    # the batch: uint8 images, int32 tokens + masks, float32 state / actions
    out["batch"] = b * (m.num_cameras * m.image_size**2 * 3 + m.max_text_len * 5
                        + 4 * (m.state_dim + m.action_horizon * (m.action_dim + 1)))
    out["total"] = total + out["batch"]
    return out


def _leaf_bytes(tree, mesh, rules) -> int:
    total = 0
    boxed = lambda x: isinstance(x, nn.LogicallyPartitioned)  # noqa: E731
    for leaf in jax.tree.leaves(tree, is_leaf=boxed):
        names = leaf.names if boxed(leaf) else None
        value = leaf.value if boxed(leaf) else leaf
        if not hasattr(value, "shape"):
            continue
        spec = tuple(logical_to_mesh_spec(names, value.shape, rules, mesh)) + (None,) * value.ndim
        shard = [d // (mesh.shape[a] if a else 1) for d, a in zip(value.shape, spec)]
        total += math.prod(shard) * np.dtype(value.dtype).itemsize
    return total


def unsplit_params(tree, mesh, rules) -> tuple[int, list[str]]:
    """Per-device bytes of parameters whose logical names ask for `dp` but that no dim of which
    divides (dp > 1), and their modules (path minus leaf, large weights only)."""
    if mesh.shape[DP] == 1:
        return 0, []
    boxed = lambda x: isinstance(x, nn.LogicallyPartitioned)  # noqa: E731
    total, where = 0, []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=boxed)[0]:
        value = leaf.value if boxed(leaf) else leaf
        names = leaf.names if boxed(leaf) else ()
        if not any(dict(rules).get(n) == DP for n in names if isinstance(n, str)):
            continue  # not meant to be split over dp (norms, replicated by their names)
        if DP in jax.tree.leaves(tuple(logical_to_mesh_spec(names, value.shape, rules, mesh))):
            continue
        total += _leaf_bytes(leaf, mesh, rules)
        name = jax.tree_util.keystr(path[:-1], simple=True, separator="/")
        if math.prod(value.shape) >= 2**20 and name not in where:  # ignore norms and biases
            where.append(name)
    return total, where


def abstract_state(cfg: TrainConfig):
    """`jax.eval_shape` of the SFT init: the boxed `TrainState` (params, opt_state, ema_params)."""
    cams = model_slots(cfg.model) if is_pi(cfg.model) else tuple(f"cam{i}" for i in range(cfg.model.num_cameras))
    return jax.eval_shape(init_fn(cfg, cams), jax.random.key(0))


def plan(cfg: TrainConfig, devices: int, batch: int, state=None) -> dict[str, object]:
    """Per-device bytes on `devices` devices for global batch `batch`.

    -> {"mesh": (dp, tp, sp), "params", "optimizer", "ema", "grads", "activations", "total"} (bytes),
    "activation_parts": per tower; "unsplit_params" / "unsplit_modules": params left unsplit over dp
    (no dim divides it; `unsplit_params`). `state`: a precomputed `abstract_state(cfg)` (reused across sizes).
    """
    shape = resolve_mesh_shape(cfg.mesh, devices)
    mesh = jax.sharding.AbstractMesh(shape, MESH_AXES)
    rules = cfg.mesh.logical_rules
    state = abstract_state(cfg) if state is None else state
    params = _leaf_bytes(state.params, mesh, rules)
    opt = _leaf_bytes(state.opt_state, mesh, rules)
    ema = _leaf_bytes(state.ema_params, mesh, rules) if state.ema_params is not None else 0
    grads = params  # same shapes, dtypes and shardings as the params
    act = activation_bytes(cfg, batch, shape)
    total = params + opt + ema + grads + act["total"]
    unsplit, where = unsplit_params(state.params, mesh, rules)
    return {"mesh": shape, "unsplit_params": unsplit, "unsplit_modules": where, "params": params,
            "optimizer": opt, "ema": ema, "grads": grads,
            "activations": act["total"], "activation_parts": act, "total": total}


__all__ = ["Tower", "towers", "activation_bytes", "abstract_state", "plan", "reduced_depth", "unsplit_params"]
