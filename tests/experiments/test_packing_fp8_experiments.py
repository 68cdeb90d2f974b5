"""The packing ablation and FP8 PTQ experiments: configs, and a `--debug` run of each through its
documented command, checking the JSON figures against each other and the markdown table against the JSON."""

import importlib
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _module(name):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"experiments.{name}")


def _run(name: str, out: pathlib.Path) -> tuple[dict, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    p = subprocess.run([sys.executable, f"experiments/{name}.py", "--debug", "--json", str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    md = out.with_suffix(".md").read_text()
    assert md in p.stdout  # the table is also printed
    return json.loads(out.read_text()), md


def _table(md: str) -> list[list[str]]:
    """Body rows of the markdown table, as stripped cells."""
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def test_configs():
    pk = _module("packing_ablation")
    assert pk.get_config(False) == pk.Config()  # full size: the bench's own model and batch
    dbg = pk.get_config(True)
    assert dbg.batch_samples and dict(dbg.model)["width"] < 256 and dbg.batches == 1
    fp = _module("fp8_ptq")
    full = fp.get_config(False)
    args = [a for _, a in full.cells]
    assert args[0][:2] == ("--preset", "small") and "--checkpoint" in args[1]
    assert args[1][args[1].index("--checkpoint") + 1] == fp.SFT_CHECKPOINT
    assert [a[:2] for _, a in fp.get_config(True).cells] == [("--preset", "tiny")]


def test_packing_ablation_debug_run(tmp_path):
    out, md = _run("packing_ablation", tmp_path / "packing.json")
    b, rows = out["bench"], out["rows"]
    assert [r["mode"] for r in rows] == ["fixed", "dynamic", "packed"]
    fixed, dynamic, packed = rows
    batch, prefix = out["config"]["batch_samples"], b["setup"]["prefix_len"]
    assert b["setup"]["batch_samples"] == batch == 8 and prefix == 200  # the debug size took effect
    assert fixed["row_shape"] == [batch, prefix]
    assert dynamic["row_shape"][0] == batch and dynamic["row_shape"][1] <= prefix
    assert packed["row_shape"] == [b["setup"]["pack_rows"], b["setup"]["pack_row_len"]]
    # fixed and dynamic batches hold the same samples: the same useful tokens, only less padding
    tokens = {r["mode"]: r["tokens_per_s"] * r["seconds"] for r in rows}
    samples = {r["mode"]: r["samples_per_s"] * r["seconds"] for r in rows}
    assert math.isclose(tokens["fixed"], tokens["dynamic"], rel_tol=1e-9)
    assert math.isclose(samples["fixed"], batch, rel_tol=1e-9) and math.isclose(samples["dynamic"], batch,
                                                                                rel_tol=1e-9)
    assert 0 < samples["packed"] <= batch
    assert dynamic["padding"] <= fixed["padding"] and packed["padding"] < fixed["padding"]
    assert math.isclose(fixed["padding"], 1 - tokens["fixed"] / (batch * prefix), rel_tol=1e-9)
    assert fixed["vs_fixed"] == 1.0 and all(r["tokens_per_s"] > 0 for r in rows)
    # the table shows exactly these figures
    table = _table(md)
    assert [t[0] for t in table] == ["fixed", "dynamic", "packed"]
    for t, r in zip(table, rows):
        assert t[1] == f"{r['row_shape'][0]} x {r['row_shape'][1]}"
        assert t[2] == f"{100 * r['padding']:.1f}%" and t[3] == f"{r['tokens_per_s']:.0f}"
        assert t[5] == f"{r['vs_fixed']:.2f}x"


def test_fp8_ptq_debug_run(tmp_path):
    out, md = _run("fp8_ptq", tmp_path / "fp8.json")
    (r,), (cell,) = out["rows"], out["cells"]
    res = cell["result"]
    assert r["preset"] == "tiny" and res["fit"]["steps"] == 2 and res["actions"]["batch"] == 2
    lang0, lang1 = r["language_bytes"]
    tot0, tot1 = r["total_bytes"]
    assert tot0 - tot1 == lang0 - lang1  # only the language tower changes
    assert res["bytes_before"]["vision"] == res["bytes_after"]["vision"]
    # 1 byte per weight instead of 4, plus one float32 scale per block and unquantized leftovers
    assert 0.6 < r["saved_language"] < 0.75 and 0 < r["saved_total"] < r["saved_language"]
    assert math.isclose(r["saved_language"], 1 - lang1 / lang0, rel_tol=1e-9)
    assert r["quantized_tensors"] > 0
    assert 0 < r["action_err_mean"] <= r["action_err_max"] < 0.2 * r["mean_abs_action"]
    assert "success" not in r
    (t,) = _table(md)
    assert t[0] == "tiny (synthetic fit)" and t[1] == f"{r['parameters']:,}"
    assert t[3] == f"{100 * r['saved_language']:.1f}%"
    assert re.fullmatch(r"[\d.]+ / [\d.]+ \([\d.]+\)", t[5]) and t[5].startswith(f"{r['action_err_max']:.4f}")
    assert t[6] == "n/a"


@pytest.mark.parametrize("name", ["packing_ablation", "fp8_ptq"])
def test_docstring_has_the_run_command(name):
    doc = _module(name).__doc__
    assert f"experiments/{name}.py" in doc and "--debug" in doc
