"""Embedders by name (the registry ``make_embedder`` reads) and what an embedder declares it prefers and can do."""

from __future__ import annotations

import argparse
import math
from dataclasses import FrozenInstanceError

import numpy as np
import pytest
from ctxret import ContextualIndex, IndexConfig
from ctxret.cli import settings as cli_settings
from ctxret.embedders import LangChainEmbedder, LocalEmbedder, OpenAIEmbedder
from ctxret.embedders.base import (
    DEFAULT_EMBED_TIMEOUT,
    NO_CAPABILITIES,
    EmbedderCapabilities,
    can_bound,
    can_embed_late,
    capabilities_of,
    gives_token_batches,
    gives_tokens,
)
from ctxret.embedders.guard import embed_timeout_of, guarded
from ctxret.embedders.registry import (
    _KINDS,
    EmbedderOptions,
    build_embedder,
    describe_embedder,
    embedder_kinds,
    register_embedder,
)
from ctxret.errors import InputError
from ctxret.query.executor import bounded_embedder
from ctxret.query.relevance import LOCAL_MINILM, calibration_for


class Words:
    """A small embedder of its own (a word-hash bag of words), declaring nothing beyond the protocol."""

    model_id = "test-words-16"
    dims = 16
    max_tokens = 1000
    default_piece_bytes = 600
    default_score_threshold = 0.2

    def embed(self, texts):
        out = np.zeros((len(texts), self.dims), np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, sum(word.encode()) % self.dims] += 1.0
            out[i, 0] += 0.01
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    async def aembed(self, texts):
        return self.embed(texts)

    def count_tokens(self, texts):
        return [len(t.encode()) for t in texts]


# -- the registry ------------------------------------------------------------------------------------------------
def test_the_shipped_kinds_local_first():
    assert embedder_kinds()[:2] == ("local", "openai")
    assert cli_settings.resolve_settings(argparse.Namespace(), {}).embedder == "local"


def test_the_same_strings_build_the_same_embedders(local_embedder, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-do-not-leak")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    local = cli_settings.make_embedder(cli_settings.resolve_settings(argparse.Namespace(), {}))
    assert type(local) is LocalEmbedder and local is not local_embedder  # a new model, as before
    assert build_embedder("local", shared=True) is local_embedder  # the harness's: one per process
    env = {
        "CTXRET_EMBEDDER": "OpenAI",
        "CTXRET_DIMS": "256",
        "CTXRET_OPENAI_TIMEOUT": "7",
        "CTXRET_OPENAI_RETRIES": "2",
    }
    emb = cli_settings.make_embedder(cli_settings.resolve_settings(argparse.Namespace(), env))
    assert type(emb) is OpenAIEmbedder
    assert (emb.model, emb.dims, emb.timeout, emb.max_retries) == ("text-embedding-3-small", 256, 7.0, 2)
    assert build_embedder("openai", shared=True).model == "text-embedding-3-small"  # no shared one: a new one
    plain = build_embedder("openai", EmbedderOptions())
    assert (plain.timeout, plain.max_retries) == (60.0, 5)  # OpenAIEmbedder's own defaults


def test_describe_never_loads_the_local_model():
    described = describe_embedder("local")
    assert not isinstance(described, LocalEmbedder)
    assert (described.model_id, described.dims, described.max_tokens) == (LocalEmbedder.model_id, 384, 256)
    config = IndexConfig.resolve(described, None)
    assert (config.context, config.weight) == ("late", 0.0)


def test_an_unknown_kind_names_the_registered_ones():
    with pytest.raises(InputError, match="no embedder kind 'bert': choose 'local' or 'openai'"):
        build_embedder("bert")
    with pytest.raises(cli_settings.UsageError, match="CTXRET_EMBEDDER='bert': choose 'local' or 'openai'"):
        cli_settings.resolve_settings(argparse.Namespace(), {"CTXRET_EMBEDDER": "bert"})


def test_a_new_kind_is_one_registration():
    register_embedder("words", lambda options: Words())
    try:
        assert embedder_kinds()[-1] == "words"
        settings = cli_settings.resolve_settings(argparse.Namespace(), {"CTXRET_EMBEDDER": "words"})
        assert isinstance(cli_settings.make_embedder(settings), Words)
        assert isinstance(describe_embedder("words"), Words)  # no describe: it is built
        parser = argparse.ArgumentParser()
        cli_settings.add_common_options(parser, suppress=False)
        assert parser.parse_args(["--embedder", "words"]).embedder == "words"
        with pytest.raises(cli_settings.UsageError, match="choose 'local', 'openai' or 'words'"):
            cli_settings.resolve_settings(argparse.Namespace(), {"CTXRET_EMBEDDER": "bert"})
        with pytest.raises(InputError, match="already registered"):
            register_embedder("words", lambda options: Words())
    finally:
        del _KINDS["words"]
    with pytest.raises(InputError, match="lowercase"):
        register_embedder("Words", lambda options: Words())
    assert "words" not in embedder_kinds() and "Words" not in embedder_kinds()


# -- capabilities --------------------------------------------------------------------------------------------------
def test_each_embedder_declares_its_capabilities(local_embedder):
    assert capabilities_of(local_embedder) == EmbedderCapabilities(context="late", weight=0.0, embed_timeout=None)
    assert capabilities_of(OpenAIEmbedder(api_key="k")) == EmbedderCapabilities(embed_timeout=None)
    assert capabilities_of(LangChainEmbedder(_LangChainLike())) == NO_CAPABILITIES
    assert capabilities_of(Words()) is NO_CAPABILITIES
    assert NO_CAPABILITIES.embed_timeout == DEFAULT_EMBED_TIMEOUT and NO_CAPABILITIES.context == "mean"
    with pytest.raises(FrozenInstanceError):
        NO_CAPABILITIES.context = "late"  # type: ignore[misc]


class _LangChainLike:
    def embed_documents(self, texts):
        return [[1.0, 0.0] for _ in texts]


def test_a_guard_and_a_forwarding_wrapper_have_the_embedders_capabilities(local_embedder):
    class Forwarding:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

    for wrapped in (guarded(local_embedder), Forwarding(local_embedder), guarded(Forwarding(local_embedder))):
        assert capabilities_of(wrapped) is LocalEmbedder.capabilities
        assert can_embed_late(wrapped) and gives_tokens(wrapped) and gives_token_batches(wrapped)
    assert capabilities_of(guarded(Words())) is NO_CAPABILITIES
    assert not can_embed_late(guarded(Words())) and not gives_tokens(Words())


def test_the_older_one_attribute_form_is_still_read():
    class Older(Words):
        embed_timeout = None
        default_context = "late"
        default_weight = 0.5
        default_relevance = LOCAL_MINILM

    caps = capabilities_of(Older())
    assert caps == EmbedderCapabilities(context="late", weight=0.5, embed_timeout=None, relevance=LOCAL_MINILM)
    assert embed_timeout_of(Older()) is None and embed_timeout_of(Words()) == DEFAULT_EMBED_TIMEOUT
    assert calibration_for(Older()) is LOCAL_MINILM
    assert calibration_for(Words()).source.startswith("uncalibrated")


def test_capabilities_choose_a_new_collections_stored_side(local_embedder):
    assert (IndexConfig.resolve(local_embedder, None).context, IndexConfig.resolve(local_embedder, None).weight) == (
        "late",
        0.0,
    )
    words = IndexConfig.resolve(Words(), None)
    assert (words.context, words.weight) == ("mean", 0.8)

    class Declared(Words):
        capabilities = EmbedderCapabilities(weight=0.6, embed_timeout=math.inf)

    declared = IndexConfig.resolve(Declared(), None)
    assert (declared.context, declared.weight) == ("mean", 0.6)
    assert embed_timeout_of(Declared()) is None  # math.inf: no limit
    index = ContextualIndex(in_memory=True, embedder=Declared(), progress=False)
    assert (index.config.context, index.config.weight) == ("mean", 0.6)


def test_only_an_embedder_that_can_bound_its_requests_is_bounded(local_embedder):
    openai_embedder = OpenAIEmbedder(api_key="k", timeout=30.0)
    assert can_bound(openai_embedder) and not can_bound(local_embedder)
    assert bounded_embedder(openai_embedder, 0.5).timeout == 0.5
    assert bounded_embedder(local_embedder, 0.5) is local_embedder
    assert bounded_embedder(openai_embedder, None) is openai_embedder
    guard = guarded(openai_embedder)
    assert bounded_embedder(guard, 0.5).guarded_embedder.timeout == 0.5
