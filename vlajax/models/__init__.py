"""The VLA model family: ViT + prefix transformer + flow / action-token heads (+ value head).

    from vlajax import models
    cfg = models.get_model_config("tiny")
    model = models.VLA(cfg)
    variables = model.init(rng, models.fake_observation(rng, 2, cfg))
    sample = models.flow_sample(model, variables, obs, rng)        # actions, chain, log_prob
    loss, metrics = models.flow_loss(model, variables, obs, actions, rng)

See docs/models.md for the input contract, the heads and the sharding rules.
"""

from vlajax.models.attention import attend, resolve_backend, te_available
from vlajax.models.build import build_model
from vlajax.models.heads import (
    FlowSample,
    TokenSample,
    actions_to_bins,
    bins_to_actions,
    flow_chain_log_prob,
    flow_loss,
    flow_sample,
    token_chunk_log_prob,
    token_loss,
    token_sample,
    value,
)
from vlajax.models.observation import Observation, fake_observation
from vlajax.models.policy import PolicyOutput, clip_actions, log_prob, sample, sft_loss
from vlajax.models.presets import PRESETS, get_model_config
from vlajax.models.quantize import dequantize_params, quantize_params
from vlajax.models.transformer import KVCache
from vlajax.models.vla import VLA

__all__ = [
    # inputs
    "Observation", "fake_observation",
    # the network
    "VLA", "build_model", "KVCache", "PRESETS", "get_model_config", "attend", "resolve_backend", "te_available",
    # flow head
    "FlowSample", "flow_loss", "flow_sample", "flow_chain_log_prob",
    # token head
    "TokenSample", "token_loss", "token_sample", "token_chunk_log_prob", "actions_to_bins", "bins_to_actions",
    # value head
    "value",
    # head-agnostic policy API (SFT / RL)
    "PolicyOutput", "sample", "log_prob", "sft_loss", "clip_actions",
    # FP8 post-training quantization
    "quantize_params", "dequantize_params",
]

