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
