"""One relevance cutoff a user reads off the docs, and it keeps right answers on documents as on conversations.

Every place that suggests a number to threshold the relevance on (``min_relevance``, ``score_threshold``,
LlamaIndex's ``SimilarityPostprocessor(similarity_cutoff=...)``) in the README, ``docs/``, the notebooks, the examples
and the adapters' docstrings suggests :data:`ctxret.query.relevance.SUGGESTED_CUTOFF`: the one measured held out
(BENCHMARKS.md). And over this project's own docs, read as a user reads a folder with LlamaIndex, that cutoff keeps
the right section of questions whose answer is one section (it once dropped the whole group: the right section
first, shown at 0.16 under the 0.3 the LlamaIndex page suggested).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ctxret.query.relevance import SUGGESTED_CUTOFF

ROOT = Path(__file__).resolve().parents[1]
#: A suggested threshold on the relevance, as code writes it.
SUGGESTS = re.compile(
    r"""(?:similarity_cutoff\s*=\s*|["']score_threshold["']\s*:\s*|["']min_relevance["']\s*:\s*|"""
    r"""\bmin_relevance\s*=\s*|\bscore_threshold\s*=\s*)(?P<value>0?\.\d+|1\.0)\b"""
)


def _places() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "notebooks").glob("*.ipynb"))]
    files += sorted((ROOT / "examples").glob("*.py"))
    for package in ("langchain_ctxret", "llamaindex_ctxret", "shared/ctxret"):
        files += [p for p in sorted((ROOT / package).rglob("*.py")) if "evaluation" not in p.parts]
    return files


def test_every_suggested_cutoff_is_the_measured_one():
    found = {}
    for path in _places():
        for m in SUGGESTS.finditer(path.read_text(encoding="utf-8")):
            found.setdefault(float(m.group("value")), []).append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert found, "no suggested cutoff found: the pattern no longer reads the docs"
    others = {v: where for v, where in found.items() if v != SUGGESTED_CUTOFF}
    assert not others, f"suggested cutoffs other than {SUGGESTED_CUTOFF}: {others}"


#: Questions whose answer is one section of this project's docs (file, words of the section's heading).
QUESTIONS = [
    ("Which environment variable selects the OpenAI embedding model?", {"cli.md", "production.md"}),
    ("How do I turn off the progress bar when indexing?", {"cli.md", "guide.md", "llamaindex.md", "langchain.md"}),
    ("What does the cosine floor do to a part that nothing answers?", {"scores.md"}),
]


@pytest.mark.slow  # the real model over every page of docs/
def test_the_suggested_cutoff_keeps_the_right_section_of_this_projects_docs(local_embedder):
    pytest.importorskip("llama_index.core")
    from ctxret import ContextualIndex
    from llama_index.core import SimpleDirectoryReader
    from llama_index.core.postprocessor import SimilarityPostprocessor

    from llamaindex_ctxret import ContextualStoreIndex

    store = ContextualStoreIndex(ContextualIndex(in_memory=True, embedder=local_embedder))
    store.insert_documents(SimpleDirectoryReader(str(ROOT / "docs")).load_data(), show_progress=False)
    cutoff = SimilarityPostprocessor(similarity_cutoff=SUGGESTED_CUTOFF)
    for question, files in QUESTIONS:
        nodes = store.as_retriever(similarity_top_k=5).retrieve(question)
        assert nodes and nodes[0].node.metadata["file_name"] in files, (question, nodes[0].node.metadata["file_name"])
        kept = cutoff.postprocess_nodes(nodes)
        assert kept and kept[0].node.node_id == nodes[0].node.node_id, (question, [round(n.score, 2) for n in nodes])
