"""A flag the command does not read is refused: one `error:` line naming it and who reads it, exit 2, nothing
written -- for every config section x command, from the table `vlajax.preflight.READS` (which fields each
command reads) and the config schema itself (every section, every top-level field).

Each (command, section) with a field the command does not read goes through `vlajax.train.main` (the CLI,
in-process) with that flag set to its preset's own value, so only the flag's presence differs from the
preset; every field of every section is checked against the table through `vlajax.preflight.check_flags`
(what `main` runs on the command line's flags), read fields accepted, unread ones refused. Presets set fields
of sections a command does not read: only the command line's flags count.
"""

from __future__ import annotations

import os

import pytest

from vlajax import preflight, train
from vlajax.config.schema import ConfigError, get_config

CHEAPEST = {"smoke": "debug", "demos": "sft-tiny", "sft": "sft-tiny", "rl": "rl-debug", "eval": "sft-tiny"}
FIELDS = preflight.config_fields()
SECTIONS = sorted({f.split(".")[0] for f in FIELDS})  # the sections and the top-level fields


def _value(cfg, field: str) -> list[str] | None:
    """The flag (and value tokens) that sets `field` to its value in `cfg`; None when it has no plain spelling."""
    obj = cfg
    for part in field.split("."):
        obj = getattr(obj, part)
    head, _, last = field.rpartition(".")
    name = "--" + (head + "." if head else "") + last.replace("_", "-")
    if isinstance(obj, bool):
        return [name] if obj else ["--" + (head + "." if head else "") + "no-" + last.replace("_", "-")]
    if isinstance(obj, tuple):
        return [name, *map(str, obj)] if obj else None
    return [name, str(obj)] if str(obj) else None


def _refused_by_main(capsys, command: str, args: list[str], out: str) -> str:
    code = train.main([command, "--preset", CHEAPEST[command], "--output-dir", out, *args])
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(errors) == 1, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert not os.path.exists(out), f"{out} was written"
    return errors[0]


def test_the_table_names_real_fields_and_every_command():
    assert set(preflight.READS) == set(train.COMMANDS) == set(CHEAPEST)
    for command, entries in preflight.READS.items():
        for e in entries:
            assert any(f == e or (e[-1] in "._" and f.startswith(e)) for f in FIELDS), (command, e)
    for (command, prefix), cond in preflight.READ_WHEN.items():
        assert prefix in preflight.READS[command] and cond in FIELDS
    from vlajax.evaluation.closed_loop import SAMPLING_FIELDS  # what eval may change on a loaded policy: read by eval

    assert all(preflight.reads("eval", f"model.{f}") for f in SAMPLING_FIELDS)


@pytest.mark.parametrize("command", sorted(CHEAPEST))
def test_every_section_the_command_does_not_read_is_refused(command, capsys, tmp_path):
    cfg = get_config(CHEAPEST[command])
    refused_sections, read_sections = [], []
    for section in SECTIONS:
        fields = [f for f in FIELDS if f.split(".")[0] == section]
        for f in fields:  # every field against the table: read ones pass, unread ones are refused
            args = _value(cfg, f) or ["--" + f.replace("_", "-"), "x"]
            if preflight.reads(command, f, cfg):
                preflight.check_flags(cfg, command, args)
            else:
                with pytest.raises(ConfigError, match="does not read"):
                    preflight.check_flags(cfg, command, args)
        unread = [f for f in fields if not preflight.reads(command, f, cfg) and _value(cfg, f)]
        if not unread:
            read_sections.append(section)
            continue
        args = _value(cfg, unread[0])  # one of the section's unread flags through the CLI
        line = _refused_by_main(capsys, command, args, str(tmp_path / f"out-{section}"))
        assert args[0] in line and f"the {command} command does not read it" in line, line
        refused_sections.append(section)
    print(f"{command}: refused {refused_sections}; read whole {read_sections}")
    assert refused_sections  # every command leaves some section unread (the table is not 'everything')


@pytest.mark.parametrize(("command", "args", "words"), [
    ("sft", ["--rl.group-size", "4"], ("--rl.group-size", "is read by rl")),
    ("sft", ["--pipeline.enabled", "--rl.clip-high", "0.3"], ("--pipeline.enabled, --rl.clip-high", "them")),
    ("eval", ["--data.dataset-dir", "demos", "--logging.progress", "plain"], ("--data.dataset-dir", "is read by")),
    ("rl", ["--pipeline.staleness-threshold", "1"], ("is read only with --pipeline.enabled",)),
    ("demos", ["--model.action-head", "tokens"], ("--model.action-head", "is read by sft / rl")),
])
def test_the_issue_examples(command, args, words, capsys, tmp_path):
    line = _refused_by_main(capsys, command, args, str(tmp_path / "out"))
    assert all(w in line for w in words), line


def test_preset_values_and_read_spellings_pass():
    """A preset may set what a command does not read (rl-grpo-tokens sets pipeline.* for its async arm and model.*,
    which eval takes from the checkpoint); flags the command reads pass in every spelling."""
    for command, args in [("rl", ["--preset", "rl-grpo-tokens", "--rl.group-size", "4"]),
                          ("eval", ["--preset", "rl-grpo-tokens", "--sft.eval-episodes-per-task", "2"]),
                          ("rl", ["--preset", "rl-debug", "--pipeline.enabled", "--pipeline.staleness-threshold", "1"]),
                          ("rl", ["--preset", "rl-debug", "--pipeline.no-enabled"]),
                          ("eval", ["--preset", "sft-tiny", "--suite", "goal", "--episodes-per-task", "2",
                                    "--model.flow-x1=zeros", "--checkpoint", "x", "--robustness"]),
                          ("sft", ["--preset", "sft-tiny", "--sft.num_steps", "2", "--model.action_head", "tokens"])]:
        cfg = train.parse(command, args)
        preflight.check_flags(cfg, command, train.overrides(command, args))
