"""vlajax.shared.atomic_files: a file is written whole or not at all."""

import json
import os

import numpy as np
import pytest

from vlajax.shared import atomic_files


def test_write_json_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "a.json")
    atomic_files.write_json(path, {"x": 1})
    assert atomic_files.write_json(path, {"x": [2, 3]}) == path
    with open(path) as f:
        assert json.load(f) == {"x": [2, 3]}
    assert os.listdir(tmp_path) == ["a.json"]


def test_a_failed_write_keeps_the_previous_file_and_removes_its_temporary(tmp_path, monkeypatch):
    path = str(tmp_path / "a.json")
    atomic_files.write_json(path, {"x": 1})
    with pytest.raises(TypeError):  # numpy arrays are not JSON: fails while serializing, before any file
        atomic_files.write_json(path, {"x": np.zeros(2)})

    def fail(fd):  # the disk "fails" after the temporary's bytes were written, before the rename
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_files.write_bytes(path, b'{"x": 2}')
    monkeypatch.undo()
    with open(path) as f:
        assert json.load(f) == {"x": 1}
    assert os.listdir(tmp_path) == ["a.json"]


def test_write_text_is_utf8(tmp_path):
    path = str(tmp_path / "t.md")
    atomic_files.write_text(path, "| π0 | 0.5 |\n")
    with open(path, "rb") as f:
        assert f.read() == "| π0 | 0.5 |\n".encode()
