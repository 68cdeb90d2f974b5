"""The planner's communication model (`research.planner.comm`): bytes over links by hand, monotonic in the
train GPUs, zero on one device, and its place in the simulated update and publication."""

import dataclasses
import json

import pytest

from research.planner import presets
from research.planner.comm import Comm, ring_allreduce_seconds
from research.planner.costs import Costs, SimLatency
from research.planner.sim import Pipeline, simulate

# 1e9 parameters, bf16, NVLink 100 GB/s, NIC 10 GB/s, 1 us a hop, nodes of 8, 512 decisions per optimizer step
C = Comm(params=1e9, param_bytes=2.0, grad_bytes=2.0, global_batch=512, micro_batch=16, update_epochs=2,
         gpus_per_node=8, intra_gbs=100.0, inter_gbs=10.0, latency_s=1e-6)


def test_ring_allreduce_bytes_match_the_hand_computation():
    # 4 GPUs on one node: each sends and receives 2 x 3/4 of 2 GB over 100 GB/s, 6 hops
    assert C.step_seconds((0, 1, 2, 3)) == pytest.approx(2 * 3 / 4 * 2e9 / 100e9 + 6 * 1e-6, rel=1e-12)
    # 8 GPUs on the second node: still NVLink; 8 GPUs straddling two nodes: the NIC rate
    assert C.step_seconds(range(8, 16)) == pytest.approx(2 * 7 / 8 * 2e9 / 100e9 + 14e-6, rel=1e-12)
    assert C.step_seconds(range(4, 12)) == pytest.approx(2 * 7 / 8 * 2e9 / 10e9 + 14e-6, rel=1e-12)
    # an update of 1024 decisions x 2 epochs / 512 per step = 4 optimizer steps (5000 -> ceil(19.53) = 20)
    assert C.steps(1024) == 4 and C.steps(5000) == 20 and C.steps(0) == 0
    assert C.update_seconds(1024, (0, 1, 2, 3)) == pytest.approx(4 * C.step_seconds((0, 1, 2, 3)), rel=1e-12)
    # FSDP re-gather: 512 / (16 x 4) = 8 micro-batches per GPU and step, each 2 all-gathers of 3/4 x 2 GB + 3 hops
    f = dataclasses.replace(C, regather_per_micro_batch=True)
    gather = 3 / 4 * 2e9 / 100e9 + 3e-6
    assert f.step_seconds((0, 1, 2, 3)) == pytest.approx(C.step_seconds((0, 1, 2, 3)) + 8 * 2 * gather, rel=1e-12)
    assert ring_allreduce_seconds(1, 1e9, 1.0, 1.0) == 0.0


def test_broadcast_is_bytes_over_the_link_and_zero_when_the_rollout_gpus_train():
    # disaggregated 1:1 on one node (rollout 0-3, train 4-7): 2 GB over NVLink + 4 hops
    assert C.broadcast_seconds((4, 5, 6, 7), (0, 1, 2, 3)) == pytest.approx(2e9 / 100e9 + 4e-6, rel=1e-12)
    # 16 + 16 over four nodes: the NIC rate
    assert C.broadcast_seconds(range(16, 32), range(16)) == pytest.approx(2e9 / 10e9 + 16e-6, rel=1e-12)
    assert C.broadcast_seconds(range(8), range(8)) == 0.0  # colocated
    assert C.broadcast_seconds(range(8), range(6)) == 0.0  # hybrid: rollout on a subset of the train GPUs


def test_zero_on_one_device_and_monotonic_in_devices():
    assert C.step_seconds((0,)) == 0.0 and C.update_seconds(10_000, (3,)) == 0.0
    t = [C.update_seconds(4096, tuple(range(n))) for n in range(1, 65)]
    assert t[0] == 0.0 and all(b > a for a, b in zip(t, t[1:]))
    assert t[8] > t[7] * 5  # the 9th GPU is on a second node: NIC instead of NVLink
    # (with the FSDP re-gather, more GPUs also mean fewer micro-batches each: not monotonic, by design)


def test_costs_carry_the_model_through_json_and_refuse_two_sources():
    c = Costs(infer_s=((4, 0.01),), train_update_s=((8, 0.2),), comm=C)
    assert Costs.from_json(json.loads(json.dumps(c.to_json()))) == c
    assert c.publish_seconds((1,), (0,)) == C.broadcast_seconds((1,), (0,))
    with pytest.raises(ValueError, match="not both"):
        dataclasses.replace(c, sync_s=1.0)
    with pytest.raises(ValueError, match="unknown comm fields"):
        Costs.from_json(c.to_json() | {"comm": {"params": 1e9, "nvlink": 1}})
    with pytest.raises(ValueError):
        Comm(params=0)
    old = Costs(infer_s=((4, 0.01),), train_update_s=((8, 0.2),), sync_s=0.3, allreduce_s=0.1)
    assert old.comm_seconds(8, (0, 1)) == 0.0 and old.publish_seconds((1,), (0,)) == 0.3


def test_sync_iteration_adds_the_broadcast_and_the_gradient_sync():
    """Disaggregated 1:1 on 4 GPUs: publication (broadcast 0,1 <- 2,3), horizon x (inference + step),
    the update's compute on 2 GPUs, then its all-reduces -- nothing overlaps."""
    costs = Costs(infer_s=((2, 0.01),), train_update_s=((4, 0.2),), sim=SimLatency(median_s=0.05), comm=C)
    p = Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="sync", placement="disaggregated", devices=4,
                 slots=1, updates=3)
    out = simulate(p, costs)
    decisions = 4 * 2
    per_update = (C.broadcast_seconds((2, 3), (0, 1)) + 2 * (0.01 + 0.05) + costs.train_seconds(decisions, 2)
                  + C.update_seconds(decisions, (2, 3)))
    assert out["env_steps_per_s"] == pytest.approx(decisions / per_update, rel=1e-9)


def test_one_device_has_no_communication_cost():
    """One device (the CPU-host validation path): with a model size and links the predictions are
    those without (publication and all-reduce 0)."""
    base = Costs(infer_s=((4, 0.01),), train_update_s=((8, 0.2),), sim=SimLatency(median_s=0.05))
    for mode in ("sync", "train_async", "+partial_rollout"):
        p = Pipeline(envs=8, horizon=3, steps_per_decision=1, mode=mode, slots=2, updates=4)
        assert simulate(p, dataclasses.replace(base, comm=C)) == simulate(p, base), mode


def test_pi05_comm_constants_are_the_documented_ones():
    c = presets.PI05_COMM
    assert (c.params, c.param_bytes, c.grad_bytes, c.global_batch, c.update_epochs, c.gpus_per_node) == (
        3.3e9, 2.0, 2.0, 1024, 2, 8)
    assert (c.intra_gbs, c.inter_gbs) == (450.0, 3.2e12 / 8 / 8 / 1e9)  # 3.2 Tb/s per node of 8 GPUs = 50 GB/s
