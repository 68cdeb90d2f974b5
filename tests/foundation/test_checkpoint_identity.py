"""A checkpoint directory that is not what the command needs is one `error:` line (exit 2) naming the
directory, what wrote it and the command or preset that fits, before anything is built -- and nothing is
written. Through `vlajax.train.main` (the CLI in-process) on real tiny checkpoints:

- SFT runs: what `vlajax.train sft` writes, by the functions it writes with (`run_files.write_policy`:
  config.json, policy.json; `checkpoint.Checkpointer`: an Orbax step of the `sft-tiny` train state, flow or
  token head). The state's values are zeros of its shapes (`jax.eval_shape` of `run_files.init_fn`): the
  identity reads files and shapes, never values, and nothing here compiles;
- RL runs: the same state saved as the RL loops save theirs (`run_files.write_policy` with source 'rl' /
  'async-rl', a step holding `{'train': ..., 'env': ...}`);
- openpi: the reference checkpoint `../shared/fixtures/openpi/policies/pi05_libero/ckpt` as it is (a raw
  openpi checkpoint) and imported by `python -m vlajax.policies.import_openpi` without `--size` (read from
  its shapes); those cases skip when ../shared is absent.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

import pytest

from vlajax import train
from vlajax.config.schema import get_config

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "openpi" / "policies"
needs_openpi = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"openpi reference data not present ({FIXTURES})")


def _sft_config(out: str, head: str):
    cfg = get_config("sft-tiny")
    return cfg.replace(output_dir=out, model=dataclasses.replace(cfg.model, action_head=head),
                       checkpoint=dataclasses.replace(cfg.checkpoint, async_save=False))


@functools.cache
def _zero_state(cfg):
    """The train state of `cfg` (sft-tiny), zeros of its shapes (its RNG key a real one)."""
    import flax.linen as nn
    import jax
    import numpy as np

    from vlajax.policies import run_files

    shapes = nn.unbox(jax.eval_shape(run_files.init_fn(cfg, tuple(sorted(cfg.env.cameras))), jax.random.key(0)))
    return jax.tree.map(lambda x: jax.random.key(0) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                        else np.zeros(x.shape, x.dtype), shapes)


def _write_run(run: str, cfg, source: str) -> str:
    """`run`/checkpoints as an SFT run (source 'sft': the train state at step 2) or an RL loop (its
    `{'train': ..., 'env': ...}` at step 1) writes it. -> the checkpoint directory."""
    import numpy as np

    from vlajax.data.normalize import NormStats
    from vlajax.policies import run_files
    from vlajax.policies.bridge import Bridge
    from vlajax.training import checkpoint

    z = lambda n: NormStats(mean=np.zeros(n, np.float32), std=np.ones(n, np.float32),  # noqa: E731
                            q01=-np.ones(n, np.float32), q99=np.ones(n, np.float32))
    bridge = Bridge(cfg.model, tuple(sorted(cfg.env.cameras)), {"actions": z(cfg.model.action_dim), "state": z(8)},
                    env_action_dim=4)
    state = _zero_state(cfg.replace(output_dir=""))
    d = os.path.join(run, "checkpoints")
    run_files.write_policy(d, cfg, bridge, source, rollout_physics=None if source == "sft" else "c")
    with checkpoint.Checkpointer(d, async_save=False) as ckpt:
        if source == "sft":
            ckpt.save(2, state, extra={"step": 2, "config": cfg.name}, force=True)
        else:
            ckpt.save(1, {"train": state, "env": [np.zeros(4, np.float32)]}, extra={"iteration": 1}, force=True)
    return d


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    root = str(tmp_path_factory.mktemp("identity"))
    out = {head: _write_run(os.path.join(root, head), _sft_config(os.path.join(root, head), head), "sft")
           for head in ("flow", "tokens")}
    for kind in ("rl", "async-rl"):
        out[kind] = _write_run(os.path.join(root, kind), _sft_config(os.path.join(root, kind), "tokens"), kind)
    return out


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> str:
    """pi05_libero's reference checkpoint imported as a user runs it, without --size (read from its shapes)."""
    if not FIXTURES.is_dir():
        pytest.skip(f"openpi reference data not present ({FIXTURES})")
    from vlajax.policies.import_openpi import main

    out = str(tmp_path_factory.mktemp("imported") / "pi05_libero")
    assert main(["--checkpoint", str(FIXTURES / "pi05_libero" / "ckpt"), "--config", "pi05_libero", "--tokenizer",
                 str(FIXTURES / "tokenizer.model"), "--out", out]) == 0
    return out


def _files(d: str) -> dict[str, tuple[int, int]]:
    """Every file under `d` with its size and mtime ({} when `d` does not exist)."""
    out = {}
    for base, _, names in os.walk(d):
        for n in names:
            st = os.stat(os.path.join(base, n))
            out[os.path.join(base, n)] = (st.st_size, st.st_mtime_ns)
    return out


def refused(capsys, argv: list[str], *words: str, dirs: tuple[str, ...] = ()) -> str:
    """`vlajax.train.main(argv)` exits 2 with one `error:` line holding `words`; nothing changes under `dirs`."""
    before = {d: _files(d) for d in dirs}
    code = train.main(argv)
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(errors) == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    for w in words:
        assert w in errors[0], errors[0]
    for d in dirs:
        assert _files(d) == before[d], f"{d} changed"
    return errors[0]


def accepted(argv: list[str]) -> None:
    """The CLI's checks before the command is imported (`parse` + `preflight` with the flags) let `argv` pass."""
    command, rest = argv[0], argv[1:]
    train.preflight(train.parse(command, rest), command, flags=train.overrides(command, rest))


def test_sft_into_the_output_dir_of_a_run_of_another_head(runs, capsys):
    run = os.path.dirname(runs["flow"])
    refused(capsys, ["sft", "--preset", "sft-tiny", "--output-dir", run, "--model.action-head", "tokens"],
            runs["flow"], "an SFT run (flow head", "model.action_head: 'flow' there, 'tokens' here",
            "--output-dir", dirs=(run,))
    accepted(["sft", "--preset", "sft-tiny", "--output-dir", run])  # its own model: it resumes
    accepted(["sft", "--preset", "sft-tiny", "--output-dir", run, "--model.num-denoise-steps", "8"])  # same state


def test_sft_into_the_output_dir_of_an_rl_run(runs, capsys):
    run = os.path.dirname(runs["rl"])
    refused(capsys, ["sft", "--preset", "sft-tiny", "--output-dir", run], runs["rl"], "a sync RL run",
            "--output-dir", dirs=(run,))


def test_rl_token_preset_from_a_flow_checkpoint(runs, capsys, tmp_path):
    out = str(tmp_path / "rl")
    refused(capsys, ["rl", "--preset", "rl-grpo-tokens", "--rl.init-from", runs["flow"], "--output-dir", out],
            f"rl.init_from={runs['flow']}", "an SFT run (flow head", "--preset rl-grpo-flow or rl-ppo-flow")
    assert not os.path.exists(out)
    refused(capsys, ["rl", "--preset", "rl-grpo-flow", "--rl.init-from", runs["tokens"], "--output-dir", out],
            "an SFT run (tokens head", "--preset rl-grpo-tokens")
    assert not os.path.exists(out)
    accepted(["rl", "--preset", "rl-grpo-tokens", "--rl.init-from", runs["tokens"], "--output-dir", out])
    accepted(["rl", "--preset", "rl-grpo-flow", "--rl.init-from", runs["flow"], "--output-dir", out])


def test_rl_from_an_rl_run_and_the_other_loop_over_a_run(runs, capsys, tmp_path):
    out = str(tmp_path / "rl")
    refused(capsys, ["rl", "--preset", "rl-grpo-tokens", "--rl.init-from", runs["async-rl"], "--output-dir", out],
            "an async RL run", "rl.init_from takes an SFT run's checkpoints")
    run = os.path.dirname(runs["rl"])
    refused(capsys, ["rl", "--preset", "rl-grpo-tokens", "--rl.init-from", runs["tokens"], "--output-dir", run,
                     "--pipeline.enabled"], runs["rl"], "a sync RL run", "--pipeline.no-enabled", dirs=(run,))
    sft_run = os.path.dirname(runs["tokens"])
    refused(capsys, ["rl", "--preset", "rl-grpo-tokens", "--output-dir", sft_run], "an SFT run",
            f"--rl.init-from {runs['tokens']}", dirs=(sft_run,))
    accepted(["rl", "--preset", "rl-grpo-tokens", "--rl.init-from", runs["tokens"], "--output-dir", run])


def test_eval_of_a_run_directory_and_of_nothing(runs, capsys, tmp_path):
    run = os.path.dirname(runs["flow"])
    refused(capsys, ["eval", "--preset", "sft-tiny", "--checkpoint", run, "--output-dir", str(tmp_path / "e")],
            f"--checkpoint {run}", "a run's output directory", runs["flow"], dirs=(run,))
    refused(capsys, ["eval", "--preset", "sft-tiny", "--checkpoint", str(tmp_path / "none")], "not a directory")
    assert not os.path.exists(tmp_path / "e")
    for kind in ("flow", "tokens", "rl", "async-rl"):  # every run's checkpoints are a policy
        accepted(["eval", "--preset", "sft-tiny", "--checkpoint", runs[kind]])
    accepted(["eval", "--preset", "sft-tiny", "--checkpoint", os.path.join(runs["flow"], "2")])  # one step


@needs_openpi
def test_a_raw_openpi_checkpoint_gets_the_import_command(capsys, tmp_path):
    raw = str(FIXTURES / "pi05_libero" / "ckpt")
    hint = f"python -m vlajax.policies.import_openpi --checkpoint {raw} --config pi05_libero"
    refused(capsys, ["eval", "--preset", "pi05-dummy", "--checkpoint", raw, "--output-dir", str(tmp_path / "e")],
            f"--checkpoint {raw}", "a raw pi05 openpi checkpoint", hint, dirs=(raw,))
    refused(capsys, ["sft", "--preset", "pi05-dummy", "--sft.init-from", raw, "--output-dir", str(tmp_path / "s")],
            f"sft.init_from={raw}", hint, dirs=(raw,))
    refused(capsys, ["rl", "--preset", "pi05-dummy", "--rl.init-from", raw, "--output-dir", str(tmp_path / "r")],
            f"rl.init_from={raw}", hint, dirs=(raw,))
    assert not any(os.path.exists(tmp_path / d) for d in "esr")


def test_an_imported_libero_policy_on_a_tabletop_suite(imported, capsys, tmp_path):
    """pi05_libero reads LIBERO's keys and answers in 7-dim actions: the tabletop `goal` suite is refused
    before the first episode (it used to run to 0% without a word)."""
    refused(capsys, ["eval", "--preset", "pi05-dummy", "--checkpoint", imported, "--suite", "goal", "--output-dir",
                     str(tmp_path / "e")], f"--checkpoint {imported}", "an imported openpi checkpoint (pi05_libero",
            "libero robot's observation keys", "7-dim actions", "'goal'", "--suite libero_spatial",
            dirs=(imported,))
    assert not os.path.exists(tmp_path / "e")
    refused(capsys, ["rl", "--preset", "pi05-dummy", "--rl.init-from", imported, "--output-dir", str(tmp_path / "r")],
            f"rl.init_from={imported}", "7-dim actions")
    accepted(["sft", "--preset", "pi05-dummy", "--sft.init-from", imported, "--output-dir", str(tmp_path / "s")])
    refused(capsys, ["sft", "--preset", "sft-tiny", "--sft.init-from", imported, "--output-dir", str(tmp_path / "s")],
            f"sft.init_from={imported}", "a pi05 preset")
