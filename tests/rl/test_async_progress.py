"""The async RL loop's terminal progress: a line per reported update, a heartbeat line after 30 s of silence."""

import time

from vlajax.rl.async_progress import AsyncProgress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_plain_lines_and_heartbeat(capsys):
    clock, steps = Clock(), [0]
    p = AsyncProgress(4, "rl async x", "plain", every=2, start=0, env_steps=lambda: steps[0], heartbeat_s=30.0,
                      clock=clock)
    clock.t, steps[0] = 29.0, 290
    assert p.heartbeat() is None  # 29 s of silence: not yet
    clock.t = 31.0
    line = p.heartbeat()
    assert line.startswith("[rl async x] 0/4 (waiting for update 1: 31 s since the start) env_steps=290")
    assert "env_sps=9.355" in line  # 290 env steps over 31 s
    assert p.heartbeat() is None  # just reported
    clock.t, steps[0] = 41.0, 390
    p.evaluated(0.25)
    p.update(1, staleness=1.0, success=0.5)  # not a multiple of every=2: no line, no reset of the silence
    clock.t, steps[0] = 51.0, 490
    p.update(2, staleness=0.0, success=0.75)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].startswith("[rl async x] 2/4 (")
    assert "env_sps=10 staleness=0 success=0.75 eval=0.25" in out[1]  # 100 steps in 10 s
    clock.t = 80.0
    assert p.heartbeat() is None  # 29 s after the update's line
    clock.t = 82.0
    assert "waiting for update 3: 31 s since the last update" in p.heartbeat()
    p.update(4, staleness=1.0)
    clock.t = 200.0
    assert "[rl async x] 4/4 (finishing: 118 s since the last update)" in p.heartbeat()


def test_thread_beats_and_none_is_silent(capsys):
    p = AsyncProgress(2, "rl async y", "plain", every=1, start=0, env_steps=lambda: 0, heartbeat_s=0.05)
    with p:
        time.sleep(0.3)
    assert "[rl async y] 0/2 (waiting for update 1" in capsys.readouterr().out
    q = AsyncProgress(2, "rl async z", "none", every=1, start=0, env_steps=lambda: 0, heartbeat_s=0.0)
    with q:
        q.update(1, staleness=0.0)
        assert q.heartbeat() is None
    assert capsys.readouterr().out == ""
