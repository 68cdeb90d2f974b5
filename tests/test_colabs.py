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
