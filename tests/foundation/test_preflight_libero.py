"""A LIBERO suite goes through the same parse and preflight as the tabletop's (`vlajax.train.main`, in this process):
a LIBERO-only flag with a tabletop suite, or a tabletop-only flag with a LIBERO suite, is one `error:` line, exit 2,
before anything is built or any worker starts -- for eval, rl and sft."""

from __future__ import annotations

import pytest

from vlajax import preflight, train
from vlajax.config.schema import get_config

TABLETOP = {"eval": ["eval", "--preset", "sft-tiny", "--suite", "spatial"],
            "rl": ["rl", "--preset", "rl-debug", "--suite", "spatial"],
            "sft": ["sft", "--preset", "sft-tiny"]}
LIBERO = {"eval": ["eval", "--suite", "libero_spatial", "--policy-server", "ws://127.0.0.1:1"],
          "rl": ["rl", "--suite", "libero_spatial", "--preset", "rl-pi05-libero-dummy", "--rl.init-from", "."],
          "sft": ["sft", "--preset", "sft-libero-small"]}
# (command, a LIBERO-only flag, a tabletop-only flag)
CASES = [("eval", ["--workers", "3"], ["--env.num-envs", "4"]),
         ("eval", ["--expert"], ["--overwrite"]),
         ("rl", ["--libero.train-inits", "5"], ["--env.episode-length", "50"]),
         ("rl", ["--libero.workers", "2"], ["--rl.eval-episodes-per-task", "3"]),
         ("sft", ["--libero.tasks", "0"], ["--env.num-envs", "4"]),
         ("sft", ["--libero.episodes-per-task", "3"], ["--sft.eval-episodes-per-task", "3"])]


def _one_line(capsys, argv: list[str], out: str) -> str:
    code = train.main([*argv, "--output-dir", out] if argv[0] != "eval" else [*argv, "--out", out])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (argv, err[-2000:])
    return lines[0]


@pytest.mark.parametrize("command,libero_flag,tabletop_flag", CASES)
def test_a_flag_of_the_other_kind_of_suite_is_one_line(command, libero_flag, tabletop_flag, capsys, tmp_path,
                                                       monkeypatch):
    monkeypatch.setenv("VLAJAX_LIBERO_VENV", str(tmp_path / "no-venv"))  # (a refusal must come before the venv's)
    line = _one_line(capsys, [*TABLETOP[command], *libero_flag], str(tmp_path / "a"))
    assert "does not read it" in line and "with a LIBERO suite" in line, line
    line = _one_line(capsys, [*LIBERO[command], *tabletop_flag], str(tmp_path / "b"))
    assert "does not read it with the LIBERO suite libero_spatial" in line and "tabletop" in line, line
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_libero_tables_name_real_fields():
    fields = preflight.config_fields()
    for command, entries in preflight.LIBERO_READS.items():
        for e in entries:
            e = e.lstrip("-")
            assert any(f == e or (e[-1] in "._" and f.startswith(e)) for f in fields), (command, e)
    cfg = get_config("rl-pi05-libero-dummy")
    libero = cfg.replace(env=type(cfg.env)(suite="libero_spatial", num_envs=cfg.env.num_envs))
    assert preflight.reads("rl", "libero.train_inits", libero) and not preflight.reads("rl", "libero.expert", libero)
    assert preflight.reads("rl", "rl.eval_every", libero) and not preflight.reads("rl", "rl.eval_seed", libero)
    assert not preflight.reads("rl", "libero.workers", cfg)  # the tabletop suite: no libero.* field is read
    assert preflight.reads("eval", "libero.expert", libero.replace(name="x"))


def test_short_eval_flags_keep_their_spelling_on_libero():
    """`eval --suite libero_* --workers 1 --tasks 0 3 --episodes-per-task 2 --no-video --robustness swap ...`: the
    spelling docs/libero.md uses, into the libero section."""
    cfg = train.parse("eval", ["--suite", "libero_spatial", "--workers", "1", "--tasks", "0", "3",
                               "--episodes-per-task", "2", "--no-video", "--robustness", "swap", "--max-steps", "9",
                               "--replan-steps", "4", "--checkpoint", "ck", "--libero.backend", "local"])
    lib = cfg.libero
    assert (lib.workers, lib.tasks, lib.episodes_per_task, lib.video, lib.robustness, lib.max_steps,
            lib.replan_steps, cfg.checkpoint.dir) == (1, (0, 3), 2, False, "swap", 9, 4, "ck")
    assert cfg.env.robustness == ""
    assert train.parse("eval", ["--suite", "libero_goal", "--robustness"]).libero.robustness == "all"
    tabletop = train.parse("eval", ["--preset", "sft-tiny", "--episodes-per-task", "2"])
    assert tabletop.sft.eval_episodes_per_task == 2 and tabletop.libero.episodes_per_task == 25
