"""The notebooks execute from top to bottom (so they cannot rot) and show what they promise."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
KERNEL = "ctxret-test-python"


@pytest.fixture
def kernel_name(tmp_path, monkeypatch):
    """A kernelspec running this interpreter, found first via JUPYTER_PATH (no user install)."""
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.executable})",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for name in (
        "CTXRET_STORE",
        "CTXRET_CHROMA_HOST",
        "CTXRET_EMBEDDER",
        "CTXRET_WEIGHT",
        "CTXRET_COLLECTION",
    ):
        monkeypatch.delenv(name, raising=False)
    return KERNEL


def execute(path: Path, kernel: str, cwd: Path):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name=kernel,
        timeout=300,
        startup_timeout=120,
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    return nb


def outputs_of(nb) -> tuple[str, list[str]]:
    """All text the notebook printed, and the MIME types of its rich outputs."""
    text, mimes = [], []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text.append(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data"):
                data = out.get("data", {})
                mimes.extend(data)
                text.append(str(data.get("text/plain", "")))
            elif out.get("output_type") == "error":
                text.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "".join(text), mimes


@pytest.mark.slow  # a Jupyter kernel running the notebook: the full suite's
def test_quickstart_notebook_executes(kernel_name, tmp_path):
    nb = execute(NOTEBOOKS / "quickstart.ipynb", kernel_name, tmp_path)
    text, mimes = outputs_of(nb)
    # indexed the three sample threads
    for thread in ("home-assistant", "ops-agent", "travel-planner"):
        assert thread in text
    # grouped results printed part by part, then the single-vector list
    assert "Part 1:" in text and "Part 8:" in text
    assert "#1 " in text
    # the comparison the notebook exists for: the groups bring back the dogs' names
    assert "grouped retrieval finds the dogs' names: True" in text
    # and a figure
    assert "image/png" in mimes
    assert not list(tmp_path.glob(".ctxret")), "the notebook must not write a store into the working directory"


@pytest.mark.slow
def test_langchain_chain_notebook_executes(kernel_name, tmp_path):
    nb = execute(NOTEBOOKS / "langchain_chain.ipynb", kernel_name, tmp_path)
    text, _ = outputs_of(nb)
    # the prompt the model got keeps one section per part, with the dogs' names under the first
    assert "### Part 1: What were my dogs called again?" in text and "### Part 2:" in text
    assert "Biscuit and Pepper" in text.split("### Part 2:")[0]
    assert "model: Your dogs are Biscuit and Pepper." in text
    assert "filter team=platform: {'runbook'}" in text
    assert "grouped chain ran: True" in text
    assert not list(tmp_path.glob(".ctxret")), "the notebook must not write a store into the working directory"


@pytest.mark.slow
def test_llamaindex_pipeline_notebook_executes(kernel_name, tmp_path):
    nb = execute(NOTEBOOKS / "llamaindex_pipeline.ipynb", kernel_name, tmp_path)
    text, _ = outputs_of(nb)
    assert "pieces parsed and stored in one run: IndexResult(added=4" in text
    assert "Priya Raman is on call" in text and "Biscuit the dog has his vaccinations" in text
    assert "inserted boiler ; deleted pieces: 1" in text
    assert not list(tmp_path.glob(".ctxret"))


@pytest.mark.slow
def test_tuning_notebook_executes(kernel_name, tmp_path):
    nb = execute(NOTEBOOKS / "tuning.ipynb", kernel_name, tmp_path)
    text, mimes = outputs_of(nb)
    assert "10 threads, 30 facts, 30 questions" in text
    assert "recommended floor:" in text and "recommended weight:" in text
    assert "RelevanceCalibration(hybrid=RelevanceModel(" in text
    assert "(my calibration)" in text and "chicken" in text
    assert mimes.count("image/png") == 3  # the floor, the weight and the reliability plots


@pytest.mark.slow
def test_indexing_in_a_notebook_shows_a_progress_bar_by_default(kernel_name, tmp_path):
    """In a Jupyter kernel stderr is no terminal, yet a bar shows (tqdm.auto; text when ipywidgets is missing);
    progress=False keeps a call quiet."""
    code = (
        "from ctxret import ContextualIndex\n"
        "index = ContextualIndex(in_memory=True)\n"
        "docs = [f'Parcel {i} left warehouse {i % 7} on route {i % 11} with {i} boxes.' for i in range(70)]\n"
        "print('added', index.add_documents(docs).added)\n"
    )
    quiet = "print('quiet', index.add_documents([d + ' (2)' for d in docs], progress=False).added)\n"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code), nbformat.v4.new_code_cell(quiet)])
    path = tmp_path / "progress.ipynb"
    nbformat.write(nb, path)
    nb = execute(path, kernel_name, tmp_path)
    first, _ = outputs_of(nbformat.v4.new_notebook(cells=[nb.cells[0]]))
    second, _ = outputs_of(nbformat.v4.new_notebook(cells=[nb.cells[1]]))
    assert "added 70" in first and "indexing" in first and "70/70" in first, first
    assert "quiet 70" in second and "indexing" not in second, second
