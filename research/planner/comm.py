"""Communication cost of a pod: gradient synchronization per update and the weight broadcast.

    comm = Comm(params=3.3e9)                               # bf16, nodes of 8, NVLink / NIC per GPU
    comm.update_seconds(decisions, train_devices=(4, 5, 6, 7))  # per update, after its compute
    comm.broadcast_seconds(train=(4, 5, 6, 7), rollout=(0, 1, 2, 3))  # one weight publication

Devices are GPU indices 0..D-1 of the run (`sim.Pipeline` numbers the rollout devices first); a
node holds `gpus_per_node` consecutive indices. A group on one node talks over NVLink
(`intra_gbs`), a group spanning nodes at the per-GPU NIC rate (`inter_gbs`): a ring through the
nodes runs at its slowest link.

- Gradient synchronization, per optimizer step over n train GPUs: a ring all-reduce of the
  gradients, 2(n-1)/n x P x grad_bytes / B + 2(n-1) x latency (the bytes of an FSDP
  reduce-scatter of the gradients plus an all-gather of the updated parameters are the same).
  With `regather_per_micro_batch` (FSDP full shard, parameters resharded after forward) each
  micro-batch of `micro_batch` decisions per GPU also all-gathers the parameters twice (forward,
  backward): 2 x ((n-1)/n x P x param_bytes / B + (n-1) x latency). Optimizer steps per update =
  ceil(decisions x update_epochs / global_batch). Zero on one GPU.
- Weight publication from the train group to rollout GPUs it does not contain: a pipelined
  broadcast, P x param_bytes / B + hops x latency (+ `publish_overhead_s`, a fixed hand-off
  cost, 0 unless given); zero when every rollout GPU trains too (colocated, hybrid: after the
  all-reduce each train GPU holds the full weights).

Bandwidths are GB/s (1e9 bytes/s) per GPU and direction. Where each default comes from:
`research/planner/presets.py` and experiments/planner ("communication cost and the pod-scale table").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

__all__ = ["Comm", "ring_allreduce_seconds"]


def ring_allreduce_seconds(n: int, nbytes: float, gbs: float, latency_s: float) -> float:
    """A ring all-reduce of `nbytes` over n GPUs at `gbs` GB/s per GPU: 2(n-1)/n x bytes / bw + 2(n-1) hops."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / (gbs * 1e9) + 2 * (n - 1) * latency_s


@dataclasses.dataclass(frozen=True)
class Comm:
    """A model's size and the pod's links (see the module docstring)."""

    params: float  # model parameters
    param_bytes: float = 2.0  # bytes per parameter as communicated (bf16)
    grad_bytes: float = 2.0  # bytes per gradient element as reduced (bf16)
    global_batch: int = 1024  # decisions per optimizer step (all train GPUs together)
    micro_batch: int = 32  # decisions per GPU and micro-batch (used by regather_per_micro_batch)
    update_epochs: int = 2  # passes over an update's decisions
    gpus_per_node: int = 8
    intra_gbs: float = 450.0  # NVLink, GB/s per GPU and direction
    inter_gbs: float = 50.0  # inter-node (RDMA NIC), GB/s per GPU and direction
    latency_s: float = 5e-6  # per hop
    regather_per_micro_batch: bool = False  # FSDP full shard: all-gather the parameters per micro-batch, twice
    publish_overhead_s: float = 0.0  # fixed seconds per publication to GPUs outside the train group, beyond the
    #   bytes (the disaggregated hand-off between resource groups; calibrated by the pi0-maniskill preset)

    def __post_init__(self):
        if self.params <= 0 or self.param_bytes <= 0 or self.grad_bytes <= 0:
            raise ValueError("comm: params, param_bytes and grad_bytes must be > 0")
        if min(self.global_batch, self.micro_batch, self.update_epochs, self.gpus_per_node) < 1:
            raise ValueError("comm: global_batch, micro_batch, update_epochs and gpus_per_node must be >= 1")
        if self.intra_gbs <= 0 or self.inter_gbs <= 0 or self.latency_s < 0 or self.publish_overhead_s < 0:
            raise ValueError("comm: bandwidths must be > 0, latency and publish_overhead_s >= 0")

    def bandwidth(self, devices: Sequence[int]) -> float:
        """GB/s of a group: NVLink on one node, the NIC rate across nodes."""
        nodes = {d // self.gpus_per_node for d in devices}
        return self.intra_gbs if len(nodes) <= 1 else self.inter_gbs

    def steps(self, decisions: int) -> int:
        """Optimizer steps in an update over `decisions` decisions."""
        return math.ceil(decisions * self.update_epochs / self.global_batch) if decisions > 0 else 0

    def step_seconds(self, devices: Sequence[int]) -> float:
        """Communication of one optimizer step over the train GPUs `devices`."""
        n = len(set(devices))
        if n <= 1:
            return 0.0
        bw = self.bandwidth(devices)
        t = ring_allreduce_seconds(n, self.params * self.grad_bytes, bw, self.latency_s)
        if self.regather_per_micro_batch:
            micro = max(math.ceil(self.global_batch / (self.micro_batch * n)), 1)
            gather = (n - 1) / n * self.params * self.param_bytes / (bw * 1e9) + (n - 1) * self.latency_s
            t += micro * 2 * gather
        return t

    def update_seconds(self, decisions: int, devices: Sequence[int]) -> float:
        """Communication of one update over `decisions` decisions on the train GPUs `devices` (0 on one GPU)."""
        return self.steps(decisions) * self.step_seconds(devices)

    def broadcast_seconds(self, train: Sequence[int], rollout: Sequence[int]) -> float:
        """One weight publication from the train group to the rollout GPUs (0 when all of them train)."""
        targets = set(rollout) - set(train)
        if not targets:
            return 0.0
        group = sorted(set(train) | targets)
        hops = len(targets)  # a chain from the train group through each target
        return (self.params * self.param_bytes / (self.bandwidth(group) * 1e9) + hops * self.latency_s
                + self.publish_overhead_s)
