"""A policy server the LIBERO workers cannot use is refused before any worker starts (one `error:` line, exit 2,
nothing written); an episode error during a run exits non-zero with the partial results named partial; an
unknown suite in any spelling is one line listing the suites; the server's metadata names no path of its host.
Real subprocesses of the `eval` / `rl` commands, real websocket servers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.libero.libero_env import venv_or_skip
from vlajax.libero import pool as pool_mod

sys.path.insert(0, os.path.dirname(__file__))
from policy_server import ChunkServer  # noqa: E402

REPO = pool_mod.REPO
ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def _eval(out, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vlajax.train", "eval", *args, "--out", str(out)], env=ENV, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip() and " INFO " not in ln and " WARNING " not in ln]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    return lines[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_closed_port_is_refused_before_any_worker(tmp_path):
    venv_or_skip()
    out = tmp_path / "out"
    r = _eval(out, "--suite", "libero_spatial", "--policy-server", f"ws://127.0.0.1:{_closed_port()}",
              "--episodes-per-task", "1", "--tasks", "0", "--workers", "1")
    assert r.returncode == 2, r.stderr[-3000:]
    assert "connection refused" in _one_error_line(r.stderr)
    assert not out.exists()


class _ErrorsForEpisodes(ChunkServer):
    """Answers the probe (a request without an episode id) with a good chunk, then every episode's requests with an
    error string, as a server that fails mid-run does."""

    async def _handle(self, ws) -> None:
        from vlajax.serve.codec import pack, unpack

        self.connections += 1
        await ws.send(pack({"observation": {}, "action": {"shape": list(self.chunk.shape)}}))
        async for message in ws:
            obs = unpack(message)
            self.requests.append(obs)
            await ws.send(pack({"actions": self.chunk}) if "libero/episode_id" not in obs else
                          "policy error: RuntimeError: the accelerator went away")


def test_wrong_action_shape_is_refused_and_an_episode_error_is_a_partial_run(tmp_path):
    venv_or_skip()
    bad = ChunkServer(np.zeros((10, 3), np.float32))  # 3 action dims: LIBERO needs >= 7
    short = ChunkServer(np.zeros((2, 7), np.float32))  # 2 actions a chunk: --replan-steps 5 needs >= 5
    failing = _ErrorsForEpisodes(np.zeros((10, 7), np.float32))
    try:
        for srv, needle in ((bad, "shape (10, 3)"), (short, "chunks of 2 actions")):
            out = tmp_path / f"out{srv.port}"
            r = _eval(out, "--suite", "libero_spatial", "--policy-server", srv.url, "--episodes-per-task", "1",
                      "--tasks", "0", "--workers", "1")
            assert r.returncode == 2, r.stderr[-3000:]
            assert needle in _one_error_line(r.stderr)
            assert not out.exists() and srv.connections == 1  # the probe's only: no worker connected
        out = tmp_path / "partial"
        r = _eval(out, "--suite", "libero_spatial", "--policy-server", failing.url, "--episodes-per-task", "1",
                  "--tasks", "0", "--workers", "1", "--max-steps", "5", "--no-video", "--num-steps-wait", "1")
        assert r.returncode == 1, r.stderr[-3000:]
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("error: 1 of 1 episodes failed") and "accelerator went away" in last, r.stderr[-2000:]
        assert not (out / "eval.json").exists() and not (out / "table.md").exists()
        with open(out / "eval.partial.json") as f:
            res = json.load(f)
        assert res["partial"] is True and res["suites"][0]["errors"] == 1
        assert (out / "table.partial.md").read_text().startswith("(partial")
    finally:
        for s in (bad, short, failing):
            s.close()


def test_unknown_suite_in_any_spelling_is_one_line_listing_the_suites(tmp_path, capsys):
    """In this process (`vlajax.train.main`, what `python -m vlajax.train` runs): eval and rl."""
    from vlajax import train

    for suite, cmd in (("libro_spatial", "eval"), ("LIBERO_SPATIAL", "eval"), ("libero_spatail", "rl")):
        out = tmp_path / "o"
        argv = ([cmd, "--suite", suite, "--policy-server", "ws://127.0.0.1:1", "--out", str(out)] if cmd == "eval"
                else [cmd, "--suite", suite, "--rl.init-from", str(tmp_path), "--output-dir", str(out)])
        assert train.main(argv) == 2, suite
        line = _one_error_line(capsys.readouterr().err)
        assert repr(suite) in line and "libero_spatial, libero_object, libero_goal, libero_10" in line, line
        assert not out.exists()


@pytest.mark.slow  # (the server compiles its policy: ~1-2 min here)
def test_served_metadata_names_no_path_of_the_host(tmp_path):
    """What `vlajax.serve` sends every client on connect: the checkpoint by its directory's name, no absolute path."""
    from tests.serve.conftest import ServerThread, tiny_policy_config, write_policy_checkpoint
    from vlajax.serve.app import ServeArgs

    ckpt = write_policy_checkpoint(str(tmp_path / "run" / "checkpoints"), tiny_policy_config(str(tmp_path / "run")))
    srv = ServerThread(ServeArgs(checkpoint=ckpt, port=0, max_batch=1))
    try:
        meta = srv.server.metadata
    finally:
        srv.stop()

    def strings(x):
        if isinstance(x, dict):
            for k, v in x.items():
                yield str(k)
                yield from strings(v)
        elif isinstance(x, list | tuple):
            for v in x:
                yield from strings(v)
        elif isinstance(x, str):
            yield x

    found = [s for s in strings(meta) if os.path.isabs(s) or str(tmp_path) in s]
    assert not found, found
    assert meta["policy"]["checkpoint"] == "checkpoints"


def test_no_ray_cluster_at_the_address_is_one_line(tmp_path, capsys):
    """`--libero.backend ray` with nothing listening at `--libero.ray-address`: refused before anything starts
    (Ray itself would retry the address for minutes); a Ray flag with the local backend is refused too."""
    pytest.importorskip("ray")
    from vlajax import train

    out = tmp_path / "o"
    port = _closed_port()
    for extra, needle in ((["--libero.backend", "ray", "--libero.ray-address", f"127.0.0.1:{port}"],
                           f"no Ray cluster answers at 127.0.0.1:{port}"),
                          (["--libero.ray-address", f"127.0.0.1:{port}"], "--libero.backend is local")):
        for cmd in (["eval", "--suite", "libero_spatial", "--expert", "--out", str(out)],
                    ["rl", "--suite", "libero_spatial", "--rl.init-from", str(tmp_path), "--output-dir", str(out)]):
            assert train.main([*cmd, *extra]) == 2, (cmd, extra)
            assert needle in _one_error_line(capsys.readouterr().err), (cmd, extra)
            assert not out.exists()
