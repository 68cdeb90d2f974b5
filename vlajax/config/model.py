"""`ModelConfig` and the named openpi tower sizes (part of `vlajax.config.schema`, which re-exports every
name here). One comment per field: tyro's `--help` and `docs/config.md` are made from them."""

from __future__ import annotations

import dataclasses
from typing import Literal

from vlajax.config.errors import check as _check

# Gemma sizes of openpi's pi0 / pi0.5 towers (`ModelConfig.paligemma_variant` /
# `action_expert_variant`): width, depth, mlp_dim, num_heads, num_kv_heads, head_dim.
GEMMA_VARIANTS: dict[str, dict[str, int]] = {
    "dummy": dict(width=64, depth=4, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16),
    "gemma_300m": dict(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256),
    "gemma_2b": dict(width=2048, depth=18, mlp_dim=16_384, num_heads=8, num_kv_heads=1, head_dim=256),
}

# SigLIP ViT sizes (big_vision names; `ModelConfig.siglip_variant` is '<size>/<patch>').
SIGLIP_VARIANTS: dict[str, dict[str, int]] = {
    "mu": dict(width=32, depth=1, mlp_dim=128, num_heads=2),
    "Ti": dict(width=192, depth=12, mlp_dim=768, num_heads=3),
    "S": dict(width=384, depth=12, mlp_dim=1536, num_heads=6),
    "B": dict(width=768, depth=12, mlp_dim=3072, num_heads=12),
    "L": dict(width=1024, depth=24, mlp_dim=4096, num_heads=16),
    "So400m": dict(width=1152, depth=27, mlp_dim=4304, num_heads=16),
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The VLA: ViT image encoder + prefix transformer + action head (+ value head).

    Named sizes live in `vlajax.models.presets` (`tiny`, `small`, `base`, `pi0-3b`).
    """

    name: str = "tiny"  # label of the model size, for logs and checkpoints
    # network: our VLA, or openpi's pi0 / pi0.5 (sized by the paligemma_/action_expert_/siglip_ fields)
    family: Literal["vla", "pi0", "pi05"] = "vla"
    paligemma_variant: Literal["dummy", "gemma_300m", "gemma_2b"] = "gemma_2b"  # pi: the VLM's Gemma size
    action_expert_variant: Literal["dummy", "gemma_300m", "gemma_2b"] = "gemma_300m"  # pi: the expert's Gemma size
    siglip_variant: str = "So400m/14"  # pi: SigLIP image encoder '<size>/<patch>' (sizes: config.SIGLIP_VARIANTS)
    siglip_depth: int = 0  # pi: SigLIP blocks (0 = the variant's depth)
    lora_rank: int = 0  # pi: LoRA rank on the VLM's attention and MLP weights (0 = none; openpi's gemma_2b_lora: 16)
    expert_lora_rank: int = 0  # pi: LoRA rank on the action expert's (0 = none; openpi's gemma_300m_lora: 32)
    # Vision tower.
    image_size: int = 32  # square input image side in pixels (images are resized to it)
    patch_size: int = 8  # ViT patch side in pixels
    # ViT patch tokens: 'patch' = linear patch embedding; 'conv' = log2(patch_size) stride-2 convs, then it
    vision_stem: Literal["patch", "conv"] = "patch"
    num_cameras: int = 2  # cameras the prefix has room for (each gives (image_size/patch_size)^2 tokens)
    vit_width: int = 64  # ViT embedding width
    vit_depth: int = 2  # ViT blocks
    vit_heads: int = 8  # ViT attention heads
    vit_mlp_dim: int = 128  # ViT MLP hidden width
    # Prefix transformer ("VLM").
    width: int = 64  # transformer embedding width
    depth: int = 2  # transformer blocks (the flow expert has as many, one per prefix layer)
    num_heads: int = 8  # query heads
    num_kv_heads: int = 4  # key/value heads (grouped-query attention); divides num_heads
    head_dim: int = 8  # per-head width
    mlp_dim: int = 128  # gated-MLP hidden width
    rope_max_wavelength: float = 10_000.0  # RoPE base wavelength
    vocab_size: int = 512  # text vocabulary size (>= the packaged tokenizer's)
    max_text_len: int = 16  # instruction tokens (padded/truncated)
    use_state_token: bool = True  # add one token carrying the proprioceptive state
    state_dim: int = 8  # proprioceptive state size (zero-padded/truncated to it)
    seq_multiple: int = 8  # the unpacked prefix is padded to a multiple of this (keep it a multiple of mesh.sp)
    # Action head.
    action_head: Literal["flow", "tokens"] = "flow"  # pi0-style flow matching, or OFT-style tokens
    action_dim: int = 7  # robot action dims (the chunk is action_horizon x action_dim)
    action_horizon: int = 4  # actions per chunk (H)
    expert_width: int = 64  # flow action-expert width
    expert_mlp_dim: int = 128  # flow action-expert gated-MLP hidden width
    num_denoise_steps: int = 4  # Euler steps of the flow sampler
    flow_sampler: Literal["ode", "flow_sde", "flow_noise"] = "ode"  # stochastic variants give log-probs
    noise_level: float = 0.5  # flow_sde noise scale (sigma_t = noise_level * sqrt(t / (1 - t)))
    # flow sampler's start x_1: 'normal' = N(0, I) per chunk (pi0); 'zeros' = 0 (a deterministic ODE policy)
    flow_x1: Literal["normal", "zeros"] = "normal"
    # flow_sde: which denoising steps are stochastic (their log-density is the log-prob): one drawn step, all, or the
    # last
    flow_sde_steps: Literal["one", "all", "last"] = "one"
    noise_std_min: float = 0.08  # flow_noise: lower bound of the learned per-step std
    noise_std_max: float = 0.16  # flow_noise: upper bound of the learned per-step std
    num_bins: int = 256  # token head: bins per action dim
    value_head: Literal["none", "prefix", "expert"] = "none"  # where the PPO value head reads from
    # auxiliary head on the prefix predicting the episode's grasp and place xy (SFT only); the variants mask the
    # frames it trains on
    aux_target: Literal["none", "grasp_place", "grasp_place_pregrasp", "grasp_place_start"] = "none"
    # K > 0: the aux head classifies the grasp xy over a K x K grid (place xy stays regressed); 0 = all regressed
    # (MSE)
    aux_grasp_bins: int = 0
    # feed the aux target into the action head (SFT: the episode's own; sampling: the model's prediction); needs
    # model.aux_target
    target_conditioning: bool = False
    # Numerics and kernels.
    dtype: Literal["float32", "bfloat16"] = "float32"  # activation dtype
    param_dtype: Literal["float32", "bfloat16"] = "float32"  # parameter dtype
    attention: Literal["auto", "xla", "cudnn", "te"] = "auto"  # auto: te on GPU with TE, else xla
    fp8: Literal["none", "flax", "te"] = "none"  # FP8 matmuls: flax's emulated ops or Transformer Engine
    remat: bool = False  # recompute each transformer block in the backward pass (saves activation memory)
    # pi families: SentencePiece model file of the prompts (openpi's paligemma_tokenizer.model)
    tokenizer_path: str = ""
    # pi05: the normalized state discretized into the prompt (False = pi0's prompt, no state)
    discrete_state_input: bool = True
    # what trains: 'all'; 'expert' = the action expert and projections (VLM frozen); 'lora' = openpi's LoRA factors
    trainable: Literal["all", "expert", "lora"] = "all"

    def __post_init__(self):
        for f in ("image_size", "patch_size", "num_cameras", "vit_width", "vit_depth", "vit_heads", "width",
                  "depth", "num_heads", "num_kv_heads", "head_dim", "mlp_dim", "expert_width",
                  "expert_mlp_dim", "seq_multiple", "state_dim", "max_text_len", "num_bins"):
            _check(getattr(self, f) >= 1, f"model.{f} must be >= 1, got {getattr(self, f)}")
        _check(self.aux_target == "none" or self.family == "vla",
               f"model.aux_target={self.aux_target!r} is for model.family='vla' (not {self.family!r})")
        _check(self.aux_grasp_bins == 0 or (self.aux_grasp_bins >= 2 and self.aux_target != "none"),
               f"model.aux_grasp_bins={self.aux_grasp_bins} must be 0 (off) or >= 2 with model.aux_target set")
        _check(not self.target_conditioning or self.aux_target != "none",
               "model.target_conditioning needs model.aux_target (e.g. 'grasp_place'): the predicted target "
               "is what the action head is conditioned on")
        if self.family == "vla":
            _check(
                self.image_size % self.patch_size == 0,
                f"model.patch_size={self.patch_size} must divide model.image_size={self.image_size}",
            )
            _check(self.vision_stem == "patch" or self.patch_size & (self.patch_size - 1) == 0,
                   f"model.vision_stem='conv' needs a power-of-2 model.patch_size, got {self.patch_size}")
            _check(self.lora_rank == 0 and self.expert_lora_rank == 0,
                   "model.lora_rank / model.expert_lora_rank are for the pi families (model.family='pi0' / 'pi05')")
        else:
            self._check_pi()
        _check(
            self.num_heads % self.num_kv_heads == 0,
            f"model.num_kv_heads={self.num_kv_heads} must divide model.num_heads={self.num_heads}",
        )
        _check(
            self.vit_width % self.vit_heads == 0,
            f"model.vit_heads={self.vit_heads} must divide model.vit_width={self.vit_width}",
        )
        _check(self.head_dim % 2 == 0, f"model.head_dim={self.head_dim} must be even (RoPE)")
        _check(self.action_horizon >= 1 and self.action_dim >= 1, "model.action_horizon/action_dim must be >= 1")
        _check(self.num_denoise_steps >= 1, "model.num_denoise_steps must be >= 1")
        _check(self.noise_level > 0, f"model.noise_level must be > 0, got {self.noise_level}")
        _check(self.trainable != "lora" or (self.family != "vla" and (self.lora_rank > 0 or self.expert_lora_rank > 0)),
               "model.trainable='lora' is not available without LoRA factors: it needs model.family 'pi0' / 'pi05' "
               "with model.lora_rank or model.expert_lora_rank > 0; or use 'all' / 'expert' (the VLM frozen)")
        _check(
            0 < self.noise_std_min < self.noise_std_max,
            f"model.noise_std_min={self.noise_std_min} must be in (0, noise_std_max={self.noise_std_max})",
        )

    def _check_pi(self) -> None:
        fam = f"model.family={self.family!r}"
        size, _, patch = self.siglip_variant.partition("/")
        _check(size in SIGLIP_VARIANTS and patch.isdigit() and int(patch) >= 1,
               f"model.siglip_variant={self.siglip_variant!r} must be '<size>/<patch>' with size in "
               f"{sorted(SIGLIP_VARIANTS)}")
        _check(self.siglip_depth >= 0, f"model.siglip_depth must be >= 0, got {self.siglip_depth}")
        _check(self.lora_rank >= 0 and self.expert_lora_rank >= 0,
               f"model.lora_rank / expert_lora_rank must be >= 0, got {self.lora_rank} / {self.expert_lora_rank}")
        _check(self.image_size % int(patch) == 0,
               f"model.siglip_variant patch {patch} must divide model.image_size={self.image_size}")
        _check(self.action_head == "flow", f"model.action_head={self.action_head!r} is not available for {fam} "
               "(the pi families have the flow action expert only)")
        _check(self.fp8 == "none", f"model.fp8={self.fp8!r} is not available for {fam}")
        _check(self.vision_stem == "patch", f"model.vision_stem={self.vision_stem!r} is not available for {fam} "
               "(SigLIP's own patch embedding)")
        _check(self.attention in ("auto", "xla"),
               f"model.attention={self.attention!r} is not available for {fam} (use 'auto' or 'xla')")
        a, b = GEMMA_VARIANTS[self.paligemma_variant], GEMMA_VARIANTS[self.action_expert_variant]
        for f in ("depth", "num_heads", "num_kv_heads", "head_dim"):
            _check(a[f] == b[f], f"model.paligemma_variant and model.action_expert_variant must share {f} "
                   f"({a[f]} vs {b[f]}): the experts attend jointly layer by layer")

    @property
    def siglip(self) -> dict[str, int]:
        """pi families: the SigLIP sizes (width, depth, mlp_dim, num_heads, patch)."""
        size, _, patch = self.siglip_variant.partition("/")
        s = dict(SIGLIP_VARIANTS[size], patch=int(patch))
        if self.siglip_depth:
            s["depth"] = self.siglip_depth
        return s

    @property
    def prefix_len(self) -> int:
        """Tokens of the unpacked prefix: cameras' patches + text (+ state), padded to seq_multiple."""
        patch = self.patch_size if self.family == "vla" else self.siglip["patch"]
        n = self.num_cameras * (self.image_size // patch) ** 2 + self.max_text_len
        n += int(self.use_state_token and self.family == "vla")
        return -(-n // self.seq_multiple) * self.seq_multiple

    @property
    def action_len(self) -> int:
        """Action tokens: H for the flow expert, H * action_dim for the token head."""
        return self.action_horizon * (self.action_dim if self.action_head == "tokens" else 1)
