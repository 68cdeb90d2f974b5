"""Every notebook in colabs/ executes top to bottom on CPU (tiny configs)."""

import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

COLABS = sorted((pathlib.Path(__file__).resolve().parent.parent / "colabs").glob("*.ipynb"))


def test_there_are_notebooks():
    assert COLABS, "colabs/ has no notebooks"


@pytest.mark.entry
@pytest.mark.parametrize("path", COLABS, ids=[p.name for p in COLABS])
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
