"""Model FLOPs from the config: per training sample, per decision, and the device's peak (MFU).

Counted: every matrix multiply of the network as it runs (2 x m x n x k), attention's scores and
weighted values at the lengths the code computes them (the padded prefix, the whole key length:
the XLA attention path evaluates masked entries too), convolutions of the conv stem. Not counted:
elementwise work (norms, activations, softmax, RoPE), embedding lookups, the optimizer -- a few
percent on the smallest models, nothing at π0's widths. `tests/models/test_flops.py` checks the
counts against XLA's `cost_analysis()` of the compiled functions within 10%.

- `forward(cfg, cameras)`: a dict of forward FLOPs per sample by part: `vision`, `prefix` (the
  language model over the prefix), `head` (one pass of the action expert / token head over the
  cached prefix), `value` (the value head, if any).
- `train_sample(cfg, cameras)`: one SFT sample = 3 x (vision + prefix + head) (the backward pass
  costs twice the forward's matmuls; with `model.remat` the recomputed forward is not counted:
  these are *model* FLOPs, what MFU divides by).
- `decision(cfg, cameras)`: one env's action chunk = vision + prefix + num_denoise_steps x head
  (flow) or one head pass (tokens) + the value head.
- `rl_update_sample(cfg, cameras)`: one decision sample of one RL epoch: the learner's log-prob pass
  (`heads.flow_chain_log_prob`: the head once per evaluated step -- flow_sde 'one': 1; 'last', 'all' and
  flow_noise: num_denoise_steps; the token head: 1) forward + backward, the value head with it.
- `peak_flops(device_kind, dtype)`: dense peak FLOP/s by device kind (`PEAK_TFLOPS`), None when
  the kind is not in the table.
- `mfu(flops_per_s, device_kind, dtype)`: achieved / peak, None without a peak.

`cameras`: the cameras a sample carries images for (the VLA encodes each present one; π models
encode the present ones and pad the missing slots). LoRA factors (π families) are counted; the
VLA's auxiliary-target and target-conditioning heads (a few per-sample vectors) are not.
"""

from __future__ import annotations

from vlajax.config.model import GEMMA_VARIANTS, ModelConfig

__all__ = ["PEAK_TFLOPS", "decision", "forward", "mfu", "peak_flops", "rl_update_sample", "train_sample"]

# Dense (no 2:4 sparsity) peak TFLOP/s per device kind, from NVIDIA's datasheets (the sparse figure is 2x):
# H100 SXM5 / H200 SXM: 989 bf16, 1979 fp8 (H100 datasheet; H200 datasheet: same Hopper tensor cores);
# H100 PCIe: 756 bf16, 1513 fp8; H100 NVL: 835 bf16, 1671 fp8 (H100 datasheet);
# A100 (SXM4 / PCIe): 312 bf16 / fp16, no fp8 (A100 datasheet, "BFLOAT16 Tensor Core 312 | 624*").
# Keys are matched as substrings of `jax.Device.device_kind` ('NVIDIA H200', 'NVIDIA H100 80GB HBM3',
# 'NVIDIA A100-SXM4-80GB'), the first match wins (so 'H100 PCIe' is listed before 'H100').
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200", {"bfloat16": 989.0, "fp8": 1979.0}),
    ("H100 PCIe", {"bfloat16": 756.0, "fp8": 1513.0}),
    ("H100 NVL", {"bfloat16": 835.0, "fp8": 1671.0}),
    ("H100", {"bfloat16": 989.0, "fp8": 1979.0}),
    ("A100", {"bfloat16": 312.0}),
)


def peak_flops(device_kind: str, dtype: str = "bfloat16") -> float | None:
    """Dense peak FLOP/s of one device of `device_kind` at `dtype` ('bfloat16' | 'fp8'); None if unknown."""
    for key, peaks in PEAK_TFLOPS:
        if key.lower() in device_kind.lower():
            return peaks[dtype] * 1e12 if dtype in peaks else None
    return None


def mfu(flops_per_s: float, device_kind: str, dtype: str = "bfloat16") -> float | None:
    """Model FLOPs utilization: achieved FLOP/s over the device's dense peak (None without a peak)."""
    peak = peak_flops(device_kind, dtype)
    return flops_per_s / peak if peak else None


def _mm(t: float, din: int, dout: int) -> float:
    return 2.0 * t * din * dout


def _attn(tq: int, tk: int, heads: int, head_dim: int) -> float:
    """Scores q.k and weighted values: two [tq, tk] x head_dim products per head."""
    return 4.0 * tq * tk * heads * head_dim


def _block(t: int, tk: int, width: int, heads: int, kv_heads: int, head_dim: int, mlp: int, gated: bool) -> float:
    """One transformer block over t tokens attending to tk keys (q, k, v, o, MLP)."""
    proj = _mm(t, width, heads * head_dim) * 2 + _mm(t, width, kv_heads * head_dim) * 2
    ffn = _mm(t, width, mlp) * (2 if gated else 1) + _mm(t, mlp, width)
    return proj + ffn + _attn(t, tk, heads, head_dim)


def _vit(tokens: int, patch_in: int, width: int, depth: int, mlp: int, out: int) -> float:
    return _mm(tokens, patch_in, width) + depth * _block(tokens, tokens, width, width, width, 1, mlp, False) \
        + _mm(tokens, width, out)


def _conv_stem(image: int, patch: int, width: int) -> float:
    k = patch.bit_length() - 1
    total, size, cin = 0.0, image, 3
    for i in range(k):
        cout = max(width >> (k - 1 - i), 8)
        size = -(-size // 2)
        total += 2.0 * size * size * 9 * cin * cout
        cin = cout
    return total


def _lora(t: int, w: int, n: int, k: int, d: int, m: int, r: int) -> float:
    """The LoRA factors of one Gemma layer over t tokens (vlajax.models.openpi.gemma's einsums)."""
    if not r:
        return 0.0
    q = 2.0 * t * (w * n * r + n * r * d)
    kv = 2.0 * t * 2 * k * (w * r + r * d)
    o = 2.0 * t * (n * d * r + n * r * w)
    ffn = 2.0 * t * 2 * (w * r + r * m) + 2.0 * t * (m * r + r * w)
    return q + kv + o + ffn


def _forward_vla(c: ModelConfig, cams: int, hidden: bool) -> dict[str, float]:
    p = (c.image_size // c.patch_size) ** 2
    if c.vision_stem == "conv":
        stem = _conv_stem(c.image_size, c.patch_size, c.vit_width) + _mm(p, c.vit_width, c.vit_width)
        vit = stem + c.vit_depth * _block(p, p, c.vit_width, c.vit_width, c.vit_width, 1, c.vit_mlp_dim, False) \
            + _mm(p, c.vit_width, c.width)
    else:
        vit = _vit(p, c.patch_size**2 * 3, c.vit_width, c.vit_depth, c.vit_mlp_dim, c.width)
    # the ViT's heads: width / vit_heads each; _block counts heads x head_dim = width either way
    vision = cams * vit + (_mm(1, c.state_dim, c.width) if c.use_state_token else 0.0)
    L = c.prefix_len
    h, kvh, d = c.num_heads, c.num_kv_heads, c.head_dim
    prefix = c.depth * _block(L, L, c.width, h, kvh, d, c.mlp_dim, True)
    if not hidden:  # only the keys / values reach the head: the last block's q, attention, o and MLP are dead code
        prefix -= _block(L, L, c.width, h, kvh, d, c.mlp_dim, True) - 2 * _mm(L, c.width, kvh * d)
    t = c.action_len
    if c.action_head == "flow":
        we, a = c.expert_width, c.action_dim
        head = c.depth * _block(t, L + t, we, h, kvh, d, c.expert_mlp_dim, True)
        head += _mm(t, a, we) + _mm(t, 2 * we, we) + _mm(t, we, we) + _mm(t, we, a)
        if c.flow_sampler == "flow_noise":
            head += _mm(t, we, a)
        vw = we
    else:
        head = c.depth * _block(t, L + t, c.width, h, kvh, d, c.mlp_dim, True) + _mm(t, c.width, c.num_bins)
        vw = c.width
    value = {"none": 0.0, "prefix": _mm(1, c.width, c.width) + _mm(1, c.width, 1),
             "expert": _mm(1, vw, c.width) + _mm(1, c.width, 1)}[c.value_head]
    return {"vision": vision, "prefix": prefix, "head": head, "value": value}


def _forward_pi(c: ModelConfig, cams: int) -> dict[str, float]:
    sig = c.siglip
    vlm, exp = GEMMA_VARIANTS[c.paligemma_variant], GEMMA_VARIANTS[c.action_expert_variant]
    p = (c.image_size // sig["patch"]) ** 2
    vision = cams * _vit(p, sig["patch"] ** 2 * 3, sig["width"], sig["depth"], sig["mlp_dim"], vlm["width"])
    n, k, d, depth = vlm["num_heads"], vlm["num_kv_heads"], vlm["head_dim"], vlm["depth"]
    L = c.prefix_len
    prefix = depth * (_block(L, L, vlm["width"], n, k, d, vlm["mlp_dim"], True)
                      + _lora(L, vlm["width"], n, k, d, vlm["mlp_dim"], c.lora_rank))
    h, a, we = c.action_horizon, c.action_dim, exp["width"]
    pi05 = c.family == "pi05"
    s = h if pi05 else h + 1  # pi0: a state token before the action tokens
    head = depth * (_block(s, L + s, we, n, k, d, exp["mlp_dim"], True)
                    + _lora(s, we, n, k, d, exp["mlp_dim"], c.expert_lora_rank))
    head += _mm(h, a, we) + _mm(h, we, a)
    if pi05:  # the time MLP (once per sample) and the adaptive norms' condition projections (2 per layer + final)
        head += 2 * _mm(1, we, we) + (2 * depth + 1) * _mm(1, we, 3 * we)
    else:
        head += _mm(h, 2 * we, we) + _mm(h, we, we) + _mm(1, a, we)
    if c.flow_sampler == "flow_noise":
        head += _mm(h, we, a)
    value = 0.0 if c.value_head == "none" else _mm(1, we if c.value_head == "expert" else vlm["width"], we) \
        + _mm(1, we, 1)
    return {"vision": vision, "prefix": prefix, "head": head, "value": value}


def forward(cfg: ModelConfig, cameras: int, prefix_hidden: bool = True) -> dict[str, float]:
    """Forward FLOPs of one sample by part (see the module docstring); `cameras` images encoded.

    prefix_hidden=False: nothing reads the prefix's last hidden state (only its keys / values reach the
    head), so XLA drops the VLA's last prefix block but its k / v projections (the VLA's blocks are a
    Python loop). The π families' layers are one `nn.scan`: every layer is computed whole either way."""
    if cfg.family == "vla":
        return _forward_vla(cfg, cameras, prefix_hidden)
    return _forward_pi(cfg, cameras)


def train_sample(cfg: ModelConfig, cameras: int) -> float:
    """Model FLOPs of one SFT sample: forward + backward of vision, prefix and one head pass (the SFT
    loss reads the prefix's hidden state only for the auxiliary target)."""
    f = forward(cfg, cameras, prefix_hidden=getattr(cfg, "aux_target", "none") != "none")
    return 3.0 * (f["vision"] + f["prefix"] + f["head"])


def decision(cfg: ModelConfig, cameras: int) -> float:
    """Model FLOPs of one env's decision (an action chunk): the prefix once, the head per denoise step
    (and the value head; the prefix's hidden state is read by a prefix value head or target conditioning)."""
    f = forward(cfg, cameras, prefix_hidden=cfg.value_head == "prefix" or cfg.target_conditioning)
    steps = cfg.num_denoise_steps if cfg.action_head == "flow" else 1
    return f["vision"] + f["prefix"] + steps * f["head"] + f["value"]


def rl_update_sample(cfg: ModelConfig, cameras: int) -> float:
    """Model FLOPs of one decision sample in one RL update epoch (forward + backward of the log-prob pass)."""
    f = forward(cfg, cameras, prefix_hidden=cfg.value_head == "prefix" or cfg.target_conditioning)
    if cfg.action_head != "flow" or (cfg.flow_sampler == "flow_sde" and cfg.flow_sde_steps == "one"):
        passes = 1
    else:
        passes = cfg.num_denoise_steps
    return 3.0 * (f["vision"] + f["prefix"] + passes * f["head"] + f["value"])
