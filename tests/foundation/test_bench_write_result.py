"""`vlajax.bench.write_result`: the benchmarks' one JSON writer."""

import json
import os

from vlajax.bench import write_result


def test_write_result_makes_folders_writes_json_and_leaves_no_temporary(tmp_path, capsys):
    path = tmp_path / "a" / "b" / "result.json"
    write_result(path, {"ratio": 1.5, "rows": [1, 2]})
    assert json.loads(path.read_text()) == {"ratio": 1.5, "rows": [1, 2]}
    assert os.listdir(path.parent) == ["result.json"]  # the temporary was renamed over it
    assert f"wrote {path}" in capsys.readouterr().out
    write_result(str(path), {"ratio": 2.0})  # a str path, over an existing file
    assert json.loads(path.read_text()) == {"ratio": 2.0}


def test_write_result_without_a_path_writes_nothing(tmp_path, capsys):
    write_result(None, {"x": 1})
    write_result("", {"x": 1})
    assert capsys.readouterr().out == ""
    assert list(tmp_path.iterdir()) == []
