"""Every notebook in colabs/ executes top to bottom on CPU (tiny configs).

The quickstart (01) and the RL notebook (04) take 2-3 minutes each on 2 cores and execute in
`make test-all` (`slow`); the default suite executes the others (03 trains: demos -> SFT -> eval ->
resume) and checks every notebook statically (`test_notebook_code_parses_and_names_what_exists`:
the cells parse, every `vlajax` name they use exists, every preset they load is registered and every
config field they set is a field).
"""

import ast
import dataclasses
import importlib
import importlib.util
import os
import pathlib
import re

import nbformat
import pytest
from nbclient import NotebookClient

COLABS = sorted((pathlib.Path(__file__).resolve().parent.parent / "colabs").glob("*.ipynb"))
# slow: what they run beyond 02 / 03 / 05 / 06 has fast default tests: the RL loop and resume
# (tests/rl/test_loop.py), RL from SFT weights with a fresh value head (tests/sft/test_init_from.py),
# a real async RL run (tests/pipeline/test_fault_exit.py, tests/pipeline/test_bench_async_loops.py),
# GAE / GRPO advantages (tests/rl/test_advantages.py), checkpoints (tests/foundation/test_checkpoint.py);
# their own code is checked by test_notebook_code_parses_and_names_what_exists
SLOW = {"01_quickstart.ipynb", "04_rl_async.ipynb"}


def test_there_are_notebooks():
    assert COLABS, "colabs/ has no notebooks"


@pytest.mark.entry
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW else p
                                  for p in COLABS], ids=[p.name for p in COLABS])
def test_notebook_executes(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and "Hardware" in nb.cells[0].source, "first cell names the hardware"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.source.startswith("# @title"), cell.source[:60]
            assert not cell.outputs, f"{path.name}: outputs must be stripped before committing"
    env_cwd = str(tmp_path)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": env_cwd}}).execute()


def test_readme_lists_every_notebook_and_each_installs_vlajax():
    readme = (COLABS[0].parent / "README.md").read_text()
    for path in COLABS:
        assert f"`{path.name}`" in readme, f"colabs/README.md does not list {path.name}"
        nb = nbformat.read(path, as_version=4)
        assert "**Colab:**" in nb.cells[0].source, f"{path.name}: the first cell names the Colab runtime"
        assert nb.cells[1].source.startswith("# @title Install vlajax"), f"{path.name}: the second cell installs vlajax"


def test_notebooks_cite_no_measured_figures():
    """The figures a user compares against live in one place (README / docs/results.md, each with its command):
    a notebook's text points there instead of quoting numbers that can drift apart from them."""
    figure = re.compile(r"\d+\.\d+\s?%|[+-]\d+(\.\d+)? points|\breaches 0\.\d+")
    for path in COLABS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                assert not figure.search(cell.source), f"{path.name}: {figure.search(cell.source).group(0)!r}"


def _config_fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("path", COLABS, ids=[p.name for p in COLABS])
def test_notebook_code_parses_and_names_what_exists(path):
    """Without running a notebook: its cells parse; every `vlajax.<name>` and `from vlajax... import <name>`
    resolves; every `get_config('<preset>')` is registered; every `dataclasses.replace(<config>, field=...)`
    and `dataclasses.replace(<config>.<section>, field=...)` names a field of that config / section."""
    import vlajax
    from vlajax.config.schema import TrainConfig

    default = TrainConfig()
    sections = {name: type(getattr(default, name)) for name in _config_fields(TrainConfig)
                if dataclasses.is_dataclass(getattr(default, name))}
    nb = nbformat.read(path, as_version=4)
    presets = set(vlajax.preset_names())
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        tree = ast.parse(cell.source)  # a SyntaxError names the cell's line
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "vlajax":
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), \
                        f"{path.name}: from {node.module} import {alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "vlajax":
                        importlib.import_module(alias.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "vlajax":
                assert hasattr(vlajax, node.attr), f"{path.name}: vlajax.{node.attr} does not exist"
            elif isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name == "get_config" and node.args and isinstance(node.args[0], ast.Constant):
                    assert node.args[0].value in presets, f"{path.name}: no preset {node.args[0].value!r}"
                owner = getattr(getattr(node.func, "value", None), "id", "")  # `dataclasses` in dataclasses.replace
                if name == "replace" and node.args and owner == "dataclasses":
                    target = node.args[0]
                    if isinstance(target, ast.Attribute) and target.attr in sections:
                        fields = _config_fields(sections[target.attr])
                    elif isinstance(target, ast.Name) and any(k.arg in sections for k in node.keywords):
                        fields = _config_fields(TrainConfig)
                    else:
                        continue
                    for k in node.keywords:
                        assert k.arg in fields, f"{path.name}: dataclasses.replace(..., {k.arg}=) is not a field"
