"""The bench-only slot path `research.bench.async_` (kept for soak, plan profile and the async experiments).

`python -m vlajax.bench async` itself (the production loops) is tested in test_bench_async_loops.py."""


import pytest

from research.bench import async_


@pytest.mark.devices(8)
@pytest.mark.timeout(180)
def test_streaming_modes_without_gradient_streaming_use_the_full_update():
    """A workload with several epochs/minibatches (grad_streaming=False): the streaming modes still
    hand micro-batches over as they arrive, but the trainer is built non-streaming (the same update)."""
    built = []

    class Spy(async_.StandInWorkload):
        def trainer(self, device, streaming, require_batches=1):
            built.append(streaming)
            return super().trainer(device, streaming, require_batches)

    w = Spy(async_.StandIn(envs=8, horizon=2, hidden=16, epochs=1))
    lat = async_.LatencyModel(median_s=0.001, reset_prob=0.5, reset_s=0.002)
    for grad_streaming in (True, False):
        row = async_.run_one(w, "cpu_longtail", "colocated", "+streaming", slots=2, updates=2, latency=lat,
                             ratio="1:1", max_wait_ms=0.0, grad_streaming=grad_streaming)
        assert row["grad_streaming"] is grad_streaming and row["max_wait_ms"] == 0.0 and row["env_steps_per_s"] > 0
    sync = async_.run_one(w, "cpu_longtail", "colocated", "sync", slots=2, updates=2, latency=lat, ratio="1:1",
                          grad_streaming=False)
    assert sync["grad_streaming"] is None
    assert built == [True, False, False]
