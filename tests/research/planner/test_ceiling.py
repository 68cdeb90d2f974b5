"""`research.planner.ceiling`: the host-core ceiling of any async speed-up, from a profile's measured pieces."""

import json

import pytest

from research.planner import ceiling


def _profile(tc, pc, tu, pu, cores=2.0):
    return {"machine": {"cores": cores, "cpu_count": 2},
            "costs": {"jax": {"collect_s": [[16, tc]], "train_update_s": [[128, tu]],
                              "parallelism": [["collect", pc], ["train", pu], ["infer", 1.0]]}}}


def test_bounds_of_a_rollout_bound_and_a_balanced_workload():
    # state MLP on MJX (the quiet profiles): collect 127.6 ms on 1.38 cores, update 2.3 ms on 1.11
    b = ceiling.ceiling(_profile(0.1276, 1.38, 0.0023, 1.11))["jax"]
    assert b["sync_cores"] == pytest.approx(1.375, abs=1e-3)
    assert b["core_bound"] == pytest.approx(2 / 1.375, abs=1e-3)  # any mode: the same work on 2 cores
    assert b["overlap_bound"] == pytest.approx(0.1299 / 0.1276, abs=1e-4)  # train_async: the collect binds
    # balanced pieces on 2 cores: the cores bind the overlap, and both bounds agree
    b = ceiling.ceiling(_profile(0.6, 1.4, 0.6, 1.8))["jax"]
    assert b["overlap_bound"] == pytest.approx(1.2 / ((0.6 * 1.4 + 0.6 * 1.8) / 2)) == b["core_bound"]
    # one-core pieces on 2 cores: perfect overlap halves the iteration
    assert ceiling.ceiling(_profile(0.5, 1.0, 0.5, 1.0))["jax"]["overlap_bound"] == pytest.approx(2.0)


def test_cli_reads_profiles_and_refuses_a_missing_one(tmp_path, capsys):
    (tmp_path / "profile.json").write_text(json.dumps(_profile(0.1, 1.0, 0.1, 1.0)))
    assert ceiling.main([str(tmp_path)]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["physics"] == "jax" and row["overlap_bound"] == 2.0
    assert ceiling.main([str(tmp_path / "nope")]) == 2 and ceiling.main([]) == 2
