"""FP8 matmuls for training, selected by `ModelConfig.fp8`: none, flax (portable), te (GPU).

Every `DenseGeneral` in the language tower and the action expert takes a `dot_general_cls`:
  * `none`  plain XLA dot.
  * `flax`  `nn.Fp8DirectDotGeneralOp`: delayed-scaling e4m3 forward / e5m2 backward FP8
            dot-general. XLA emulates it on CPU (slow, exact to the recipe) and fuses it on GPUs
            with FP8 support. Scales and amax histories live in the `_overwrite_with_gradient`
            collection; `apply_gradients` below replaces them by their "gradients".
  * `te`    Transformer Engine's `make_dot_general_cls(Float8CurrentScaling())` (stateless
            current scaling); needs a GPU with TE, and runs inside `autocast(cfg)`.
The vision tower always runs in the activation dtype (as in the JD recipe).
"""

from __future__ import annotations

import contextlib
from typing import Any

import flax.linen as nn
import jax
import optax

from vlajax.models.attention import try_import_te

OWG = "_overwrite_with_gradient"
MODES = ("none", "flax", "te")


def dot_general_cls(mode: str) -> Any:
    """The `dot_general_cls` for DenseGeneral under FP8 `mode` (None = plain dot)."""
    if mode not in MODES:
        raise ValueError(f"unknown fp8 mode {mode!r}; choose one of {MODES}")
    if mode == "none":
        return None
    if mode == "flax":
        return nn.Fp8DirectDotGeneralOp
    te_mods = try_import_te()
    if te_mods is None or jax.default_backend() != "gpu":
        raise RuntimeError("model.fp8='te' needs Transformer Engine and a GPU; use fp8='flax' or 'none'")
    from transformer_engine.common.recipe import Float8CurrentScaling  # noqa: PLC0415

    return te_mods[1].make_dot_general_cls(Float8CurrentScaling())


def autocast(mode: str, mesh_resource: Any = None):
    """Context for init and apply: TE's `autocast` when mode == 'te', else a no-op."""
    if mode != "te":
        return contextlib.nullcontext()
    te, _ = try_import_te()
    from transformer_engine.common.recipe import Float8CurrentScaling  # noqa: PLC0415

    kw = {} if mesh_resource is None else {"mesh_resource": mesh_resource}
    return te.autocast(enabled=True, recipe=Float8CurrentScaling(), **kw)


def mesh_resource(mesh: Any) -> Any:
    """TE's `MeshResource` for our mesh: data parallel over 'dp', tensor parallel over 'tp'
    (the axes `vlajax.training.sharding` names), for `autocast(mode, mesh_resource(mesh))`."""
    from transformer_engine.jax.sharding import MeshResource  # noqa: PLC0415 (GPU + TE only)

    names = set(mesh.axis_names)
    return MeshResource(dp_resource="dp" if "dp" in names else None, tp_resource="tp" if "tp" in names else None)


def apply_gradients(
    variables: dict, grads: dict, tx: optax.GradientTransformation, opt_state: optax.OptState
) -> tuple[dict, optax.OptState]:
    """One optimizer update of `variables['params']`; other collections (FP8 metas) take `grads[...]`.

    `grads` is the gradient w.r.t. the *whole* variables dict. For flax FP8 ops the
    "gradient" of a scale / amax history is its new value (the overwrite-with-gradient trick).
    """
    updates, opt_state = tx.update(grads["params"], opt_state, variables["params"])
    new = dict(variables)
    new["params"] = optax.apply_updates(variables["params"], updates)
    for col in variables:
        if col != "params":
            new[col] = grads[col]
    return new, opt_state
