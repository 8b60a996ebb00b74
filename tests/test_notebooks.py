"""The notebooks in notebooks/ run clean, top to bottom, in a fresh kernel (their own working folder: they write
files), and are committed without outputs."""
import glob
import os

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks",
                                          "*.ipynb")))


def test_there_are_the_four_notebooks_and_they_carry_no_outputs():
    names = [os.path.basename(p) for p in NOTEBOOKS]
    assert names == ["01_quickstart.ipynb", "02_fused_kernels.ipynb", "03_benchmarking.ipynb",
                     "04_batch_scoring.ipynb"]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and not any(c.outputs or c.execution_count for c in code), path


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_clean(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
