"""Mesh axes, the logical-to-mesh sharding tables (data, not code) and `MeshConfig` (part of
`vlajax.config.schema`, which re-exports every name here)."""

from __future__ import annotations

import dataclasses

from vlajax.config.errors import check as _check

# Mesh axis names. Defined once here; `vlajax.training.sharding` re-exports them.
DP, TP, SP = "dp", "tp", "sp"
MESH_AXES: tuple[str, str, str] = (DP, TP, SP)

# Logical axis name -> mesh axis (or None = replicated). Model code names only logical axes.
# Parameters: `embed` is sharded over dp (FSDP), heads / mlp / vocab over tp (Megatron-style).
# Activations: batch over dp, sequence over sp, heads / mlp over tp.
LOGICAL_RULES: dict[str, tuple[tuple[str, str | None], ...]] = {
    "fsdp_tp_sp": (
        ("batch", DP),
        ("embed", DP),
        ("mlp", TP),
        ("heads", TP),
        ("kv_heads", TP),
        ("head_dim", None),
        ("vocab", TP),
        ("patch", None),
        ("layers", None),
        ("act_batch", DP),
        ("act_len", SP),
        ("act_embed", None),
        ("act_heads", TP),
        ("act_kv_heads", TP),
        ("act_mlp", TP),
        ("act_vocab", TP),
    ),
    # Pure data parallelism: parameters replicated, only the batch is split.
    "dp_only": (
        ("batch", DP),
        ("act_batch", DP),
    ),
}




@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Device mesh: `dp x tp x sp` over all devices of all processes."""

    dp: int = -1  # data (and FSDP) parallel size; -1 = all devices not used by tp and sp
    tp: int = 1  # tensor parallel size (attention heads, MLP hidden units)
    sp: int = 1  # sequence parallel size (activations split along the token axis)
    rules: str = "fsdp_tp_sp"  # name of a table in vlajax.config.schema.LOGICAL_RULES
    rule_overrides: tuple[str, ...] = ()  # entries 'logical=mesh_axis' (or 'logical=' for replicated)

    def __post_init__(self):
        _check(self.dp == -1 or self.dp >= 1, f"mesh.dp must be -1 or >= 1, got {self.dp}")
        _check(self.tp >= 1, f"mesh.tp must be >= 1, got {self.tp}")
        _check(self.sp >= 1, f"mesh.sp must be >= 1, got {self.sp}")
        _check(
            self.rules in LOGICAL_RULES,
            f"mesh.rules={self.rules!r} is unknown; choose one of {sorted(LOGICAL_RULES)}",
        )
        for entry in self.rule_overrides:
            name, sep, axis = entry.partition("=")
            _check(bool(sep) and bool(name), f"mesh.rule_overrides entry {entry!r} must be 'logical=axis'")
            _check(axis in ("", *MESH_AXES), f"mesh.rule_overrides {entry!r}: axis must be one of {MESH_AXES}")

    @property
    def logical_rules(self) -> tuple[tuple[str, str | None], ...]:
        """The rule table with overrides applied (later entries win)."""
        rules = dict(LOGICAL_RULES[self.rules])
        for entry in self.rule_overrides:
            name, _, axis = entry.partition("=")
            rules[name] = axis or None
        return tuple(rules.items())

