"""Sizing embedding requests before they are sent."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputError, InputTooLongError

#: OpenAI's limit on inputs per embeddings request.
MAX_INPUTS_PER_REQUEST = 2048
#: OpenAI's limit on total bytes per embeddings request (kept with margin).
MAX_BYTES_PER_REQUEST = 300_000


def utf8_len(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes (lone surrogates count as the 3 bytes of U+FFFD)."""
    # "surrogatepass" writes a lone surrogate as 3 bytes, the size of the U+FFFD that clean_text
    # puts in its place ("replace" would write a 1-byte "?" and undercount).
    return len(text.encode("utf-8", "surrogatepass"))


def plan_batches(
    texts: Sequence[str],
    max_inputs: int = MAX_INPUTS_PER_REQUEST,
    max_bytes: int = MAX_BYTES_PER_REQUEST,
) -> list[list[int]]:
    """Group input indices into requests of at most ``max_inputs`` inputs and ``max_bytes`` bytes.

    Order is kept: concatenating the batches gives ``0 .. len(texts) - 1``. An input that alone is
    over ``max_bytes`` raises :class:`InputTooLongError` naming it; nothing is dropped.
    """
    if max_inputs < 1 or max_bytes < 1:
        raise InputError(f"max_inputs and max_bytes must be positive, got {max_inputs} and {max_bytes}")
    batches: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for i, text in enumerate(texts):
        size = utf8_len(text)
        if size > max_bytes:
            raise InputTooLongError(
                f"input {i} is {size:,} bytes, over the {max_bytes:,}-byte request limit; "
                "split it into smaller pieces (pack_text_pieces) before embedding"
            )
        if current and (len(current) >= max_inputs or current_bytes + size > max_bytes):
            batches.append(current)
            current, current_bytes = [], 0
        current.append(i)
        current_bytes += size
    if current:
        batches.append(current)
    return batches
