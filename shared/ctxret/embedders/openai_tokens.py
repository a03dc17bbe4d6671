"""Counting OpenAI tokens offline: tiktoken's encoding when a copy is on disk, else an upper bound in bytes."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InputTooLongError
from .batching import utf8_len

logger = logging.getLogger(__name__)

#: tiktoken encoding of each known model (an unknown model is counted in bytes).
MODEL_ENCODINGS = {
    model: "cl100k_base" for model in ("text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002")
}
#: Where tiktoken fetches each encoding from (its cache file is named by the URL's sha1).
_ENCODING_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
#: Without a tokenizer, an input of more than this many UTF-8 bytes per allowed token is refused.
BYTES_PER_TOKEN_REFUSAL = 4

_tiktoken_lock = threading.Lock()


def _tiktoken_dirs() -> list[Path]:
    """Directories that may hold tiktoken's cached encoding files, without touching the network."""
    dirs: list[Path] = []
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        if os.environ["TIKTOKEN_CACHE_DIR"]:
            dirs.append(Path(os.environ["TIKTOKEN_CACHE_DIR"]))
    elif os.environ.get("DATA_GYM_CACHE_DIR"):
        dirs.append(Path(os.environ["DATA_GYM_CACHE_DIR"]))
    else:
        dirs.append(Path(tempfile.gettempdir()) / "data-gym-cache")
    try:  # llama-index-core (ctxret[llamaindex]), when installed, ships cl100k_base for offline use
        spec = importlib.util.find_spec("llama_index.core")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        dirs.append(Path(spec.origin).parent / "_static" / "tiktoken_cache")
    return dirs


@functools.lru_cache(maxsize=8)
def offline_tiktoken(encoding_name: str) -> Any | None:
    """The tiktoken encoding if it loads without the network, else None (tried once, cached).

    tiktoken downloads a missing encoding file with no timeout, so it is only asked for an
    encoding whose file is already on disk.
    """
    url = _ENCODING_URLS.get(encoding_name)
    if url is None:
        return None
    key = hashlib.sha1(url.encode()).hexdigest()
    try:
        import tiktoken
    except ImportError:
        logger.debug("tiktoken is not installed; counting UTF-8 bytes instead of tokens")
        return None
    for directory in _tiktoken_dirs():
        if not (directory / key).is_file():
            continue
        with _tiktoken_lock:
            saved = os.environ.get("TIKTOKEN_CACHE_DIR")
            os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)
            try:
                return tiktoken.get_encoding(encoding_name)
            except Exception as exc:  # noqa: BLE001 - any failure means "no offline tokenizer"
                logger.debug("tiktoken %s did not load from %s: %r", encoding_name, directory, exc)
            finally:
                if saved is None:
                    os.environ.pop("TIKTOKEN_CACHE_DIR", None)
                else:
                    os.environ["TIKTOKEN_CACHE_DIR"] = saved
    logger.debug("no offline copy of tiktoken %s; counting UTF-8 bytes instead", encoding_name)
    return None


def check_input_sizes(
    sent: Sequence[int], sent_texts: Sequence[str], encoding: Any | None, model: str, max_tokens: int, max_bytes: int
) -> None:
    """Refuse, before anything is sent, an input over the model's token limit or the request byte limit.

    With an offline tiktoken ``encoding`` an input is refused when it has more than ``max_tokens``
    tokens. Without one, counts are UTF-8 byte lengths (an upper bound), and an input is refused
    only when its byte length is over ``4 * max_tokens`` -- English runs ~4 bytes per token, so
    such an input is nearly always over the limit -- and a warning is logged for one between
    ``max_tokens`` and ``4 * max_tokens`` bytes (the server may still reject it: a 400, raised as
    ``EmbeddingError``). ``sent`` holds the caller's input numbers of ``sent_texts`` (for messages).
    """
    if encoding is not None:
        counts = [len(ids) for ids in encoding.encode_ordinary_batch(sent_texts)]
        for i, count in zip(sent, counts, strict=True):
            if count > max_tokens:
                raise InputTooLongError(
                    f"input {i} is {count:,} tokens, over {model}'s limit of "
                    f"{max_tokens:,}; nothing was sent. Split it into smaller pieces "
                    "(pack_text_pieces) before embedding"
                )
    else:
        hard = BYTES_PER_TOKEN_REFUSAL * max_tokens
        doubtful = []
        for i, text in zip(sent, sent_texts, strict=True):
            size = utf8_len(text)
            if size > hard:
                raise InputTooLongError(
                    f"input {i} is {size:,} UTF-8 bytes, over {hard:,} bytes "
                    f"({BYTES_PER_TOKEN_REFUSAL} x {model}'s limit of {max_tokens:,} "
                    "tokens; no offline tokenizer to count exactly), so it is almost surely "
                    "too long; nothing was sent. Split it into pieces (pack_text_pieces)"
                )
            if size > max_tokens:
                doubtful.append(i)
        if doubtful:
            logger.warning(
                "%d input(s) (first: input %d) are over %d UTF-8 bytes and may be over "
                "%s's %d-token limit; no offline tokenizer to check (the server may refuse it)",
                len(doubtful),
                doubtful[0],
                max_tokens,
                model,
                max_tokens,
            )
    for i, text in zip(sent, sent_texts, strict=True):
        size = utf8_len(text)
        if size > max_bytes:
            raise InputTooLongError(
                f"input {i} is {size:,} UTF-8 bytes, over the {max_bytes:,}-byte request "
                "limit; nothing was sent. Split it into pieces (pack_text_pieces)"
            )
