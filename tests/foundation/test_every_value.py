"""Every offered value, before compiling: the values come from the config schema itself (every `Literal`
field of `TrainConfig`, recursively, and every registered preset), and each is tried against each
command on its cheapest preset through the CLI's validation entry point (`vlajax.train.parse` +
`vlajax.train.preflight`, what `vlajax.train.main` runs before it imports the command): it is accepted,
or refused with a `ConfigError` (one `error:` line, exit 2) -- never any other exception. In-process
(~1 ms a value): no JAX compile can happen here, so every refusal is before the first compile.

The values that could get past a looser check and crash or be refused only after compiling run
through the real CLI in tests/foundation/test_invalid_flags.py, which asserts the refusal precedes
any compile in the process's log (`JAX_LOG_COMPILES=1`).
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from vlajax.config.schema import ConfigError, TrainConfig, preset_descriptions
from vlajax.train import COMMANDS, parse, preflight

CHEAPEST = {"smoke": "debug", "demos": "debug", "sft": "sft-tiny", "rl": "rl-debug", "eval": "sft-tiny"}


def literal_fields(cls: type = TrainConfig, prefix: str = "") -> list[tuple[str, tuple]]:
    """(dotted field, its offered values) for every `Literal` field of `cls`, recursively."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            out += literal_fields(t, prefix + f.name + ".")
        elif typing.get_origin(t) is typing.Literal:
            out.append((prefix + f.name, typing.get_args(t)))
    return out


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _validate(command: str, args: list[str]) -> str:
    """'ok', or 'refused: <message>'; any other exception fails the test (a traceback for a user)."""
    try:
        preflight(parse(command, args), command)
    except ConfigError as e:
        msg = str(e)
        assert msg and "\n" not in msg, repr(msg)  # one line
        return "refused: " + msg
    return "ok"


def test_the_schema_offers_what_the_issue_names():
    fields = dict(literal_fields())
    assert "cudnn" in fields["model.attention"] and "gae" in fields["rl.advantage"]
    assert len(fields) >= 30 and sum(len(v) for v in fields.values()) >= 80  # a real enumeration, not a sample
    assert set(CHEAPEST) == set(COMMANDS)  # a new command needs its cheapest preset here


@pytest.mark.parametrize("command", sorted(CHEAPEST))
def test_every_literal_value_is_accepted_or_refused_in_one_line(command):
    outcomes = {}
    for field, values in literal_fields():
        for v in values:
            outcomes[f"{field}={v}"] = _validate(command, ["--preset", CHEAPEST[command], _flag(field), str(v)])
    refused = {k: v for k, v in outcomes.items() if v != "ok"}
    print(f"{command}: {len(outcomes)} values, {len(refused)} refused")
    assert len(outcomes) >= 80


@pytest.mark.parametrize("command", sorted(CHEAPEST))
def test_every_preset_is_accepted_or_refused_in_one_line(command):
    for preset in preset_descriptions():
        _validate(command, ["--preset", preset])


@pytest.mark.parametrize(("command", "args", "words"), [
    ("sft", ["--preset", "sft-tiny", "--model.attention", "cudnn"], "needs an NVIDIA GPU"),
    ("rl", ["--preset", "rl-debug", "--model.attention", "cudnn"], "state MLP policy"),
    ("rl", ["--preset", "rl-debug", "--rl.algo", "grpo", "--rl.advantage", "gae"], "bootstraps from a critic"),
    ("rl", ["--preset", "rl-async-debug", "--rl.algo", "grpo"], "GRPO's episodic groups run through collect"),
    ("rl", ["--preset", "rl-async-debug", "--rl.update-epochs", "2"], "pipeline.streaming needs rl.update_epochs=1"),
    ("rl", ["--preset", "rl-async-debug", "--pipeline.num-slots", "3", "--pipeline.require-batches", "3",
            "--rl.micro-batches", "3"], "does not split into pipeline.num_slots=3"),
    # found by the run-to-first-update sweep (python -m vlajax.bench values): each was a traceback after set-up
    ("rl", ["--preset", "rl-debug", "--env.obs-mode", "pixels"], "model.flow_sampler='ode'"),
    ("rl", ["--preset", "rl-debug", "--env.obs-mode", "pixels", "--model.flow-sampler", "flow_sde"],
     "model.value_head='none'"),
    ("rl", ["--preset", "rl-debug", "--env.physics-impl", "warp"], "only on an NVIDIA GPU"),
])
def test_the_values_that_crashed_after_compiling_are_refused_by_validation(command, args, words):
    """Each of these could end in a traceback or a refusal after 8-10 compiles."""
    out = _validate(command, args)
    assert out.startswith("refused: ") and words in out, out
