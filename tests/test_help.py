"""`python -m vlajax.train --help` and `COMMAND --help`: short sections, no run history in the help text.

A section is a block of lines between blank lines (a config section with its fields, the commands, the
presets, a command's short flags); at the fallback width of a pipe (100 columns) none exceeds 80 lines.
The help text is the config fields' comments: they say what a field does, never which seeds, sessions or
issues a number came from.
"""

import re

import pytest

from vlajax import train

MAX_SECTION_LINES = 80
FORBIDDEN = re.compile(r"\bseeds\b|\bsessions?\b|\bissues?\s*#?\d|#\d{2,}|\battempts?\b", re.IGNORECASE)


def _help(capsys, *args: str) -> str:
    assert train.main([*args, "--help"]) == 0
    return capsys.readouterr().out


def _sections(text: str) -> list[list[str]]:
    blocks, cur = [], []
    for line in text.splitlines():
        if line.strip():
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    return blocks + ([cur] if cur else [])


@pytest.mark.parametrize("command, preset", [(c, "debug") for c in ("", "smoke", "demos", "sft", "rl", "eval")]
                         + [("sft", "pi05"), ("rl", "pi05")])
def test_help_sections_are_short_and_say_what_fields_do(capsys, monkeypatch, command, preset):
    monkeypatch.setenv("COLUMNS", "100")
    text = _help(capsys, *([command, "--preset", preset] if command else []))
    blocks = _sections(text)
    assert len(blocks) >= 3, text
    longest = max(blocks, key=len)
    assert len(longest) <= MAX_SECTION_LINES, f"{len(longest)} lines: {longest[0]}"
    bad = [line for line in text.splitlines() if FORBIDDEN.search(line)]
    assert not bad, bad


def test_command_help_lists_only_what_the_command_reads(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    sft, ev = _help(capsys, "sft"), _help(capsys, "eval")
    assert "--sft.learning-rate" in sft and "--sft.learning-rate" not in ev
    assert "--checkpoint.dir" in ev and "= --checkpoint.dir" in ev  # eval's short flag
    assert "Values: preset 'debug'" in sft
    # an override shows in the values; a bad one is one error line
    assert "--model.width INT = 96" in _help(capsys, "sft", "--model.width", "96")


def test_forbidden_words_regex_catches_history():
    for text in ("over 3 seeds", "the 12th session's run", "see issue 63", "as in #63", "two attempts"):
        assert FORBIDDEN.search(text), text
    for text in ("root seed; every RNG stream is derived from it", "RNG seed of the evaluation episodes"):
        assert not FORBIDDEN.search(text), text
