"""Shared pytest fixtures."""

from __future__ import annotations

# --- embedders (owner: embedders work; keep additions to this block) -------------------------
import pytest


@pytest.fixture(scope="session")
def local_embedder():
    """The process-wide LocalEmbedder (real model) for the session; skips without ctxret[local]."""
    from ctxret.errors import MissingExtraError

    try:
        from ctxret.embedders.local import shared_local_embedder

        return shared_local_embedder()
    except MissingExtraError as exc:
        pytest.skip(f"LocalEmbedder unavailable: {exc}")


@pytest.fixture(scope="session")
def openai_server(local_embedder):
    """A local OpenAI-compatible embeddings server on 127.0.0.1 (see tests/openai_server.py)."""
    from openai_server import serve

    with serve(local_embedder) as server:
        yield server


@pytest.fixture
def fake_openai(openai_server):
    """The session's server, reset (no recorded requests, no pending faults) for one test."""
    openai_server.reset()
    yield openai_server
    openai_server.reset()


# --- end embedders block ----------------------------------------------------------------------


# --- store (Chroma server) ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory):
    """A real Chroma server (`chroma run` on 127.0.0.1, free port, temp folder), stopped at the end."""
    from chroma_server import run_chroma

    with run_chroma(tmp_path_factory.mktemp("chroma-server") / "data") as server:
        yield server


# --- end store block ----------------------------------------------------------------------------


# --- the index (one fixture that always closes; see tests/README.md) ---------------------------
@pytest.fixture(scope="session")
def hash_embedder():
    """The hashing embedder (no model): for tests about storage, writes, ids, filters and errors."""
    from ctxret.embedders.hashing import HashEmbedder

    return HashEmbedder()


@pytest.fixture(scope="module")
def index_embedder(hash_embedder):
    """The embedder the shared ``index`` is built with: the hashing one. A module whose tests assert on ranking
    or semantic quality overrides it (``def index_embedder(local_embedder): return local_embedder``)."""
    return hash_embedder


@pytest.fixture(scope="module")
def index_options():
    """``ContextualIndex`` keywords of the shared ``index`` (a module overrides it: a store folder or
    ``in_memory=True``, ``lexical=False``, a collection); without a store, a temporary folder."""
    return {}


@pytest.fixture(scope="module")
def index_data():
    """What the shared ``index`` is filled with before its module's tests: a callable taking the index, or None."""
    return None


def _open_index(factory, embedder, options):
    from ctxret import ContextualIndex

    options = {"progress": False, **options}
    named = any(options.get(k) is not None for k in ("store", "path", "host", "client"))
    if not named and not options.get("in_memory"):
        options["store"] = factory()
    return ContextualIndex(embedder=embedder, **options)


@pytest.fixture(scope="module")
def index(index_embedder, index_options, index_data, tmp_path_factory):
    """One ``ContextualIndex`` per module (``index_embedder``, ``index_options``, filled by ``index_data``),
    closed after the module's last test whatever happened. For a fresh index per test, use ``open_index``."""
    ix = _open_index(lambda: tmp_path_factory.mktemp("index") / "store", index_embedder, index_options)
    try:
        if index_data is not None:
            index_data(ix)
        yield ix
    finally:
        ix.close()


@pytest.fixture
def open_index(index_embedder, tmp_path_factory):
    """A factory of fresh indexes for one test: ``open_index(**ContextualIndex keywords)`` (``embedder=``
    defaults to ``index_embedder``, the store to a new temporary folder); every index it opened is closed
    after the test, whatever happened."""
    opened = []

    def make(**options):
        embedder = options.pop("embedder", index_embedder)
        ix = _open_index(lambda: tmp_path_factory.mktemp("index") / "store", embedder, options)
        opened.append(ix)
        return ix

    try:
        yield make
    finally:
        for ix in reversed(opened):
            ix.close()


# --- end index block -----------------------------------------------------------------------------
