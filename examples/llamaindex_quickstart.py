"""ctxret in LlamaIndex: node parser in a pipeline → store → grouped retriever → query engine.

Run: python examples/llamaindex_quickstart.py   (from a clone, after ``pip install -e ".[local]"``; offline)
"""
# ruff: noqa: T201

from __future__ import annotations

import tempfile
from itertools import groupby

from ctxret import ContextualIndex
from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine

from llamaindex_ctxret import (
    ContextualNodeParser,
    ContextualRetriever,
    add_documents_to_index,
    documents_from_messages,
)

RUNBOOK = """# Deploys
We deploy the web app every Tuesday. The pipeline runs in GitHub Actions.

## Rollback
To roll back a bad deploy, run make rollback. It restores the previous container image.
"""
CHAT = [
    {
        "role": "user",
        "content": "What did the vet say about Biscuit's limp?",
        "timestamp": "2026-10-17T09:30:00",
    },
    {
        "role": "assistant",
        "content": "The vet said Biscuit sprained a hind leg and needs two weeks of rest.",
    },
]


def main() -> None:
    documents = [
        Document(text=RUNBOOK, id_="runbook", metadata={"title": "Runbook", "team": "ops"}),
        *documents_from_messages(CHAT, thread_id="user-42"),
    ]
    with tempfile.TemporaryDirectory() as folder:
        index = ContextualIndex(folder)  # embedded Chroma + the local MiniLM model

        # 1. Parse: the pipeline's nodes are the core's labelled pieces (node id = piece id).
        nodes = IngestionPipeline(transformations=[ContextualNodeParser.from_index(index)]).run(
            documents=documents
        )
        print(f"{len(nodes)} pieces, e.g. {nodes[0].text!r}")

        # 2. Store: the same documents through the core's write path (blended vectors, same ids).
        result = add_documents_to_index(index, documents)
        print(f"stored {result.added} pieces with their blended vectors")

        # 3. Retrieve and answer: one group per part of the question.
        retriever = ContextualRetriever(index, similarity_top_k=2, score_threshold=None)
        engine = RetrieverQueryEngine.from_args(
            retriever,
            llm=MockLLM(),
            node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.3)],
        )
        response = engine.query("How do I roll back a deploy? What did the vet say about Biscuit?")
        for group, members in groupby(
            response.source_nodes, key=lambda n: n.node.metadata["group"]
        ):
            members = list(members)
            print(f"\npart {group}: {members[0].node.metadata['group_query']!r}")
            for n in members:
                header, body = n.node.text.split("\n", 1)
                print(f"  {n.score:.3f}  {header}  {body[:60]}")


if __name__ == "__main__":
    main()
