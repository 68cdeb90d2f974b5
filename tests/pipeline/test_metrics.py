"""Pipeline metrics on a synthetic timeline whose answers are worked out by hand."""

import pytest

from vlajax.pipeline.metrics import Timeline, role_of, summarize


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _timeline():
    clock = FakeClock()
    tl = Timeline(clock)
    for lane in ("trainer", "rollouter", "rollouter/slot1", "weights"):
        tl.register(lane)
    tl.add_idle("trainer", "samples", 0.0, 2.0)
    tl.add_idle("trainer", "samples", 5.0, 6.0)
    tl.add_idle("rollouter", "pacing", 1.0, 4.0)
    # consumed: (t, samples, staleness, span)
    tl.record_consumed(4, 0, 0, t=1.0)
    tl.record_consumed(4, 1, 0, t=2.0)
    tl.record_consumed(2, 2, 1, t=3.0)
    tl.record_rejected(2, t=3.0)
    for t, n in ((0.5, 4), (1.5, 4), (2.5, 4), (7.0, 4)):
        tl.record_produced(n, t=t)
    for t, d in ((1.0, 4), (2.0, 8), (3.0, 2)):
        tl.record_depth(d, t=t)
    for t, b in ((1.0, 2), (2.0, 4), (3.0, 4)):
        tl.record_batch(b, t=t)
    tl.record_env_steps(100, t=4.0)
    clock.t = 10.0
    return tl, clock


def test_role_of():
    assert role_of("rollouter/slot3") == "rollouter" and role_of("trainer") == "trainer"


def test_summary_full_window():
    tl, _ = _timeline()
    m = summarize(tl, 0.0, 10.0)
    assert m["trainer/idle_ratio"] == pytest.approx(3 / 10)  # 2 s + 1 s idle of 10 s
    assert m["rollouter/idle_ratio"] == pytest.approx((3 / 10 + 0) / 2)  # mean over its two lanes
    assert m["weights/idle_ratio"] == 0.0
    assert m["staleness/mean"] == pytest.approx((4 * 0 + 4 * 1 + 2 * 2) / 10)  # sample-weighted
    assert m["staleness/max"] == 2
    assert (m["staleness/hist_0"], m["staleness/hist_1"], m["staleness/hist_2"]) == (4, 4, 2)
    assert m["staleness/stale_samples"] == 6
    assert m["partial/version_span_max"] == 1 and m["partial/version_span_mean"] == pytest.approx(1 / 3)
    assert m["samples/acceptance_rate"] == pytest.approx(8 / 10)
    assert m["samples/consumed_per_s"] == pytest.approx(10 / 10)
    assert m["samples/produced_per_s"] == pytest.approx(16 / 10)
    assert m["queue/depth_mean"] == pytest.approx(14 / 3) and m["queue/depth_max"] == 8
    assert m["inference/batch_mean"] == pytest.approx(10 / 3) and m["inference/batch_max"] == 4
    assert (m["inference/batch_hist_2"], m["inference/batch_hist_4"]) == (1, 2)
    assert m["env/steps_per_s"] == pytest.approx(10.0)


def test_summary_clips_to_window():
    tl, _ = _timeline()
    m = summarize(tl, 1.0, 6.0)  # 5 s window
    assert m["trainer/idle_ratio"] == pytest.approx((1.0 + 1.0) / 5)  # [1,2] and [5,6]
    assert m["rollouter/idle_ratio"] == pytest.approx((3.0 / 5) / 2)
    assert m["samples/produced_per_s"] == pytest.approx(8 / 5)  # produced at 1.5 and 2.5
    assert m["samples/consumed_per_s"] == pytest.approx(10 / 5)


def test_open_idle_period_counts_until_now():
    clock = FakeClock()
    tl = Timeline(clock)
    tl.register("trainer")
    clock.t = 8.0
    tl.begin_idle("trainer", "samples")
    clock.t = 10.0
    assert summarize(tl)["trainer/idle_ratio"] == pytest.approx(2 / 10)
    tl.end_idle("trainer")
    clock.t = 20.0
    assert summarize(tl)["trainer/idle_ratio"] == pytest.approx(2 / 20)


def test_waiting_for_inference_is_not_idle_but_is_reported():
    clock = FakeClock()
    tl = Timeline(clock)
    tl.register("rollouter/slot0")
    tl.add_idle("rollouter/slot0", "inference", 0.0, 5.0)
    tl.add_idle("rollouter/slot0", "pacing", 5.0, 6.0)
    clock.t = 10.0
    m = summarize(tl)
    assert m["rollouter/idle_ratio"] == pytest.approx(0.1)
    assert m["rollouter/wait_inference_ratio"] == pytest.approx(0.5)
    assert m["rollouter/wait_pacing_ratio"] == pytest.approx(0.1)


def test_window_reporter_logs_each_window_to_tensorboard_and_json(tmp_path):
    import glob
    import json

    from vlajax.pipeline.metrics import WindowReporter
    from vlajax.training.logging import MetricsLogger

    clock = FakeClock()
    tl = Timeline(clock)
    tl.register("trainer")
    logger = MetricsLogger(str(tmp_path / "tb"))
    rep = WindowReporter(tl, logger, every=2, json_path=str(tmp_path / "m.jsonl"), extra=lambda: {"version": 7.0})
    tl.add_idle("trainer", "samples", 0.0, 1.0)
    clock.t = 4.0
    assert rep(1) is None  # not a reporting update
    first = rep(2)
    assert first["trainer/idle_ratio"] == pytest.approx(1 / 4) and first["version"] == 7.0
    tl.add_idle("trainer", "samples", 4.0, 7.0)
    clock.t = 10.0
    second = rep(4)
    assert second["trainer/idle_ratio"] == pytest.approx(3 / 6)  # only the new window [4, 10]
    logger.close()
    lines = [json.loads(ln) for ln in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [ln["update"] for ln in lines] == [2, 4] and lines[1]["trainer/idle_ratio"] == pytest.approx(0.5)
    assert glob.glob(str(tmp_path / "tb" / "events.out.tfevents.*"))
