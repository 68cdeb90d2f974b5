"""`python -m vlajax.bench serve` end to end on the tiny model (slow: compiles a server's buckets)."""

import json
import subprocess
import sys

import pytest

from tests.serve.test_openpi_client import REPO, _env


@pytest.mark.slow
def test_bench_serve_writes_rows_targets_and_a_plot(tmp_path):
    out = tmp_path / "serve.json"
    r = subprocess.run([sys.executable, "-m", "vlajax.bench", "serve", "--preset", "sft-tiny", "--clients", "1", "4",
                        "16", "--seconds", "1", "--warmup-s", "0.5", "--max-batch", "4", "--replicas", "1", "2",
                        "--repeats", "1", "--json", str(out)],
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    assert [(row["replicas_flag"], row["clients"]) for row in res["rows"]] == [(1, 1), (1, 4), (1, 16),
                                                                               (2, 1), (2, 4), (2, 16)]
    for row in res["rows"]:
        assert row["requests"] > 0 and not row["errors"] and row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
        assert row["server_replicas"] == row["replicas_flag"] and row["server_infer_ms_mean"] > 0
    assert res["rows"][2]["mean_batch"] > 1 and res["server_exit_codes"] == {"1": 0, "2": 0}
    for entry in res["summary"]:
        assert set(entry["targets"]) >= {"rps16_over_rps1", "p95_16_over_p50_1"}
    assert (tmp_path / "serve.png").stat().st_size > 0


def test_bench_serve_refuses_bad_flags():
    from vlajax.bench.serve import main

    assert main(["--clients", "0"]) == 2
    assert main(["--checkpoint", "/nonexistent/dir"]) == 2
    assert main(["--replicas", "1", "1"]) == 2 and main(["--repeats", "0"]) == 2
    assert main(["--wait", "eager"]) == 2 and main(["--wait", "fixed", "fixed"]) == 2


def test_summary_ratios_pair_rows_of_the_same_repeat():
    from vlajax.bench.serve import summarize

    def row(rep, wait, clients, rps, p50, p95):
        return {"repeat": rep, "code": "current", "replicas_flag": 0, "wait_rule": wait, "clients": clients,
                "requests_per_s": rps, "p50_ms": p50, "p95_ms": p95, "p99_ms": p95, "mean_batch": 1.0,
                "server_replicas": 2}

    rows = [row(0, "adaptive", 1, 100, 2, 3), row(0, "adaptive", 16, 300, 10, 20),
            row(1, "adaptive", 1, 200, 4, 5), row(1, "adaptive", 16, 400, 10, 40),
            row(0, "fixed", 1, 50, 8, 9), row(0, "fixed", 16, 400, 10, 16)]
    out = {e["wait_rule"]: e for e in summarize(rows, (0,), ("current",), ("adaptive", "fixed"))}
    sixteen = out["adaptive"]["rows"][1]
    assert sixteen["rps_over_1"] == {"median": 2.5, "min": 2.0, "max": 3.0}  # 300/100 and 400/200, not 350/150
    assert sixteen["p95_over_p50_1"] == {"median": 10.0, "min": 10.0, "max": 10.0}  # 20/2 and 40/4
    assert out["adaptive"]["targets"]["rps_met"] is False
    assert out["fixed"]["targets"]["rps16_over_rps1"]["median"] == 8.0


def test_start_server_skips_what_imports_print_before_the_serving_line(tmp_path):
    """The GPU image's mujoco_mjx prints 'Failed to import warp' on stdout before the server's line (2026-11-28)."""
    from vlajax.bench.serve import _start_server

    pkg = tmp_path / "vlajax" / "serve"
    pkg.mkdir(parents=True)
    (tmp_path / "vlajax" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import time\nprint(\"Failed to import warp: No module named 'warp'\", "
                                     "flush=True)\nprint('serving ws://127.0.0.1:1234', flush=True)\ntime.sleep(60)\n")
    proc, url = _start_server("unused", [], str(tmp_path / "server.log"), str(tmp_path))
    try:
        assert url == "ws://127.0.0.1:1234"
    finally:
        proc.kill()
        proc.wait()
    (pkg / "__main__.py").write_text("print('no server here', flush=True)\nraise SystemExit(3)\n")
    with pytest.raises(RuntimeError, match=r"(?s)did not start \(exit code 3\).*no server here"):
        _start_server("unused", [], str(tmp_path / "server.log"), str(tmp_path))
