"""examples/analysis.ipynb and examples/analysis.py: a valid notebook, the same cells in both files, and
the code cells run in order on the demo inputs they make (so the example cannot rot)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from tests.conftest import ROOT

NOTEBOOK = ROOT / "examples" / "analysis.ipynb"
SCRIPT = ROOT / "examples" / "analysis.py"


def py_cells(text: str) -> list[tuple[str, str]]:
    """The (cell_type, source) cells of a jupytext percent script: ``# %%`` starts a code cell,
    ``# %% [markdown]`` a markdown cell whose lines lose their ``# ``; the header before the first
    marker is not a cell; blank lines around a cell are dropped."""
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# %%"):
            cells.append(("markdown" if "[markdown]" in line else "code", []))
        elif cells:
            kind, lines = cells[-1]
            lines.append((line[2:] if line.startswith("# ") else line[1:] if line == "#" else line)
                         if kind == "markdown" else line)
    return [(kind, "\n".join(lines).strip("\n")) for kind, lines in cells]


def notebook_json(cells: list[tuple[str, str]]) -> dict:
    """An nbformat 4.5 notebook of ``cells`` without outputs (how examples/analysis.ipynb is made)."""
    out = []
    for i, (kind, source) in enumerate(cells):
        lines = source.split("\n")
        cell = {"cell_type": kind, "id": f"cell-{i:02d}", "metadata": {},
                "source": [line + "\n" for line in lines[:-1]] + lines[-1:]}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        out.append(cell)
    return {"cells": out, "metadata": {
        "jupytext": {"formats": "ipynb,py:percent"},
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python", "pygments_lexer": "ipython3"}}, "nbformat": 4, "nbformat_minor": 5}


def test_the_notebook_is_valid_nbformat_4_and_matches_the_script():
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    assert notebook["nbformat"] == 4 and notebook["nbformat_minor"] >= 5
    assert notebook["metadata"]["kernelspec"]["language"] == "python"
    ids = [cell["id"] for cell in notebook["cells"]]
    assert len(set(ids)) == len(ids)
    for cell in notebook["cells"]:
        assert cell["cell_type"] in ("code", "markdown") and isinstance(cell["source"], list)
        assert all(isinstance(line, str) for line in cell["source"])
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None   # committed without outputs
    # the two files hold the same cells: regenerate the notebook from the script to compare
    assert notebook == notebook_json(py_cells(SCRIPT.read_text(encoding="utf-8"))), (
        "examples/analysis.ipynb differs from examples/analysis.py; regenerate it: python -c 'import json; from "
        "tests.test_example_notebook import *; NOTEBOOK.write_text(json.dumps(notebook_json(py_cells(SCRIPT.read_text()))"
        ", indent=1, ensure_ascii=False) + chr(10))'")
    kinds = [kind for kind, _ in py_cells(SCRIPT.read_text(encoding="utf-8"))]
    assert kinds.count("code") >= 10 and kinds[0] == "markdown"


def test_the_notebook_runs_on_its_demo_inputs(tmp_path, monkeypatch):
    out = tmp_path / "analysis"
    for name in ("AICB_LOG", "AICB_WORKLOAD", "AICB_SIM", "AICB_LOG_AFTER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AICB_ANALYSIS_OUT", str(out))
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    namespace: dict = {"__name__": "__main__"}
    shown = 0
    for index, cell in enumerate(c for c in notebook["cells"] if c["cell_type"] == "code"):
        exec(compile("".join(cell["source"]), f"analysis.ipynb code cell {index}", "exec"), namespace)
        if cell["source"][-1].strip() == "fig":
            # Jupyter shows a cell's value through its _repr_png_ (issue 21: figures made without pyplot printed
            # "<Figure size ...>" unless the user ran %matplotlib inline)
            assert namespace["fig"]._repr_png_().startswith(b"\x89PNG\r\n\x1a\n"), index
            shown += 1
    assert shown >= 8
    for name in ("busbw_vs_size.png", "timeline.png", "time_share.png", "workload_sizes.png", "sim_breakdown.png",
                 "sim_layers.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), name
    assert ET.parse(out / "iteration_times.svg").getroot().tag.endswith("svg")
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "Simulation: where the iteration goes" in page
    # the demo log holds what the notebook says: 3 measured iterations, and the comparison found every row in both
    assert namespace["stats"].count == 3
    assert set(namespace["changes"]["status"]) == {"both"}
    # doubling the NIC bandwidth made the DP all-reduce faster (the only NIC traffic of the demo)
    dp = namespace["changes"][namespace["changes"]["comm_group"] == "dp_group"]
    assert len(dp) and (dp["busbw_change_pct"] > 0).all()


def test_the_script_header_holds_no_code():
    # the lines before the first cell marker are not a cell: they must be comments only
    header, _, body = SCRIPT.read_text(encoding="utf-8").partition("\n# %%")
    assert all(line.startswith("#") or not line.strip() for line in header.splitlines()) and body
