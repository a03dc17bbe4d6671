"""LangChain's standard embeddings test suites, run on CtxretEmbeddings (the real local model)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")

from langchain_tests.integration_tests import EmbeddingsIntegrationTests  # noqa: E402
from langchain_tests.unit_tests import EmbeddingsUnitTests  # noqa: E402

from langchain_ctxret.embeddings import CtxretEmbeddings  # noqa: E402


class TestCtxretEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[CtxretEmbeddings]:
        return CtxretEmbeddings


class TestCtxretEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[CtxretEmbeddings]:
        return CtxretEmbeddings  # default: the process-wide LocalEmbedder
