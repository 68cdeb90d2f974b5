"""The planner's adaptive batching (`Pipeline.adaptive`, the rollout lane's default rule): a call fires as soon as
every slot with a segment in flight has posted, or at T_max (`max_wait_s`); a slot blocked in admission is not
waited for. Checked on the simulator's generator, then against a measured bench run's requests per forward."""

import pytest

from research.planner import sim, validate
from research.planner.sim import Pipeline
from tests.research.planner.test_jitter import _costs
from tests.research.planner.test_threaded_steps import ROOT


def _fire_time(adaptive: bool, t_max: float = 1.0) -> tuple[float, int]:
    """Two slots of one generator: slot 0 posts at t=0; slot 1 blocks in admission at t=1 ms (it leaves the
    active set). -> (when slot 0's answer came, the call's batch size)."""
    p = Pipeline(envs=2, horizon=1, steps_per_decision=1, mode="rollout_async", slots=2, max_wait_s=t_max,
                 adaptive=adaptive)
    run = sim._Run(p, _costs(), 0)
    queue, wake, active = [], sim._Signal(run.env), {0, 1}
    run.env.process(run.generator(0, queue, wake, active))
    answered = []

    def slot0():
        reply = run.env.event()
        queue.append((run.env.now, reply, None, 0))
        wake.fire()
        yield reply
        answered.append(run.env.now)

    def slot1_blocks():
        yield run.env.timeout(0.001)
        active.discard(1)
        wake.fire()

    run.env.process(slot0())
    run.env.process(slot1_blocks())
    run.env.run(until=5.0)
    return answered[0], run.batches[0]


def test_a_blocked_slot_is_not_waited_for_with_the_adaptive_rule():
    infer = _costs().infer_seconds(2)  # the call's own seconds (rows padded to the generator's 2 slots)
    t, n = _fire_time(adaptive=True)
    assert n == 1 and t == pytest.approx(0.001 + infer)  # fired when slot 1 left: every active slot had posted
    t, n = _fire_time(adaptive=False)
    assert n == 1 and t == pytest.approx(1.0 + infer)  # the fixed rule waits T_max for the request never coming
    t, _ = _fire_time(adaptive=True, t_max=0.0005)
    assert t == pytest.approx(0.0005 + infer)  # T_max still bounds the adaptive wait


def test_requests_per_forward_match_the_measured_run():
    """`bench async` on this CPU (rl-debug, 16 envs, 4 slots, horizon 8; MJX and C MuJoCo): the adaptive rule at
    T_max 1 s gathered 3.43 / 3.56 requests per forward, the fixed 2 ms wait 1.83 / 1.88. The planner, with the
    profile of that workload and its measured call spread (`jitter`), predicts 4.0 for the adaptive rows (the
    simulated slots are re-admitted together after an update, so every call gathers all four; the real lane's
    threads are re-admitted one by one and the first fires alone) and ~1.6 for the fixed ones: within 20%."""
    runs = [str(ROOT / "results/bench/async_adaptive_cpu_slots4_tmax1000.json")]
    out = validate.validate(runs, str(ROOT / "results/bench/plan_profile_prod15/p0"), seeds=2, jitter=True)
    rows = [r for r in out["rows"] if r["mode"] == "rollout_async"]
    assert len(rows) == 4  # mjx and cpu-sim, adaptive and fixed
    for r in rows:
        assert r["predicted_inference_batch"] == pytest.approx(r["measured_inference_batch"], rel=0.2), r
    adaptive = [r["predicted_inference_batch"] for r in rows if r["measured_inference_batch"] > 3]
    fixed = [r["predicted_inference_batch"] for r in rows if r["measured_inference_batch"] < 2]
    assert len(adaptive) == len(fixed) == 2 and min(adaptive) > 1.5 * max(fixed)
