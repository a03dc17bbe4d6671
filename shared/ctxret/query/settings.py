"""How a search runs: :class:`SearchSettings`, query-time only (never recorded; an index holds defaults, each call
may override them)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import InitVar, dataclass, fields, replace
from datetime import date, datetime, timedelta
from functools import partial
from typing import Any, Literal

import numpy as np

from ..blend import OWN_WEIGHT
from ..errors import InputError
from ..ingest.config import MAX_INT
from ..text import MAX_PARTS
from .fusion import FusionSettings
from .hyde import DEFAULT_HYDE_WEIGHT, as_hyde
from .mmr import DEFAULT_FETCH_K, DEFAULT_LAMBDA_MULT, check_fetch_k, check_lambda_mult
from .options import Option, option, option_of, parse_bool, parse_float, parse_int, parse_python, parse_time
from .relevance import FITTED, RelevanceCalibration
from .rerank import DEFAULT_RERANK_CANDIDATES, check_reranker

__all__ = ["SearchSettings", "check_search_keys", "check_search_options", "search_options"]

_MAX_DEADLINE_MS = 86_400_000  # a day

#: ``per=``: what one hit of a group is (see :mod:`ctxret.query.documents`).
PER_CHOICES = ("piece", "section", "document")
#: Flat option names that set a field of ``SearchSettings.hybrid`` (a :class:`FusionSettings`): name -> its field.
HYBRID_OPTIONS = {
    "fusion": "method",
    "lexical_weight": "lexical_weight",
    "rrf_k": "rrf_k",
    "candidates": "candidates",
    "lexical_floor": "lexical_floor",
    "document_lexical_weight": "document_lexical_weight",
}
#: The option that is no field: ``score_threshold``, the adapters' relevance floor (resolved when the settings are
#: made; see :class:`SearchSettings`).
SCORE_THRESHOLD = Option(
    parse=partial(parse_float, none=True, auto=True),
    metavar="R",
    shown_default="auto: none",
    help="a floor on the relevance (0-1, the score the adapters show): a number sets --min-relevance, 'none' turns "
    "every floor off (the cosine floor too, unless --cosine-floor is a number)",
)


def _calibration(text: str) -> RelevanceCalibration | None:
    """``--relevance``: a fitted calibration by its model id, ``auto``/``none`` (the embedder's) or module:attribute."""
    low = text.strip()
    if low.lower() in ("auto", "none"):
        return None
    if low in FITTED:
        return FITTED[low]
    return parse_python(low)


def _time_windows(text: str) -> bool | str:
    low = text.strip().lower()
    return "asking" if low == "asking" else parse_bool(low)


@dataclass(frozen=True)
class SearchSettings:
    """How a search runs. Query-time only: an index holds defaults, each call may override them.

    * ``k``: hits per part (per group), not in total.
    * ``cosine_floor``: the cosine floor; ``"auto"`` = the embedder's default
      (``Embedder.default_score_threshold``), ``None`` = no floor. A part comes back empty unless one of its first
      hits clears it and one shares the part's words; in a group that has an answer, hits are kept down to half of it;
      a part that names a time window has none (:mod:`ctxret.query.floor`).
    * ``score_threshold`` (given, never stored): a floor on the score the adapters show, the relevance in [0, 1], as
      in LangChain (``similarity_score_threshold``) and both adapters: a number sets ``min_relevance``; ``None``
      turns every floor off (``min_relevance`` and, unless ``cosine_floor`` is a number, the cosine floor);
      ``"auto"`` changes nothing. One name, one scale everywhere (the cosine floor is ``cosine_floor``).
    * ``max_parts`` (≤ parts a message is split into) and ``split`` (``False``: one
      whole-message vector, the baseline).
    * ``query_weight``: blend weight of a part against its whole message (0.8); ``None`` = the
      collection's ``weight``. It is separate from the stored weight: a collection of pure
      late-chunked vectors (weight 0) is searched with parts that keep 80% of their own vector.
    * ``lexical``: hybrid search on (``True``), off (``False``) or on when the index has a lexical
      index (``None``); ``hybrid``: its fusion settings (:class:`FusionSettings`).
    * ``parents``: attach each hit's whole turn or section and keep one hit per parent in a group.
    * ``max_message_bytes``: a longer message is refused (64 KiB by default: a message is split into
      at most 8 parts, and each part over the model's limit is embedded window by window, so a
      1 MB message costs tens of seconds); ``None`` for no limit.
    * ``hyde``: HyDE per part — ``fn(part) -> hypothetical answer`` (or a LangChain / LlamaIndex
      LLM, prompted by :mod:`ctxret.query.hyde`); each part's query vector is blended with its
      answer's, ``hyde_weight`` being the part's share (0.5). ``None``: off.
    * ``views``: search the index's LLM-written views too (when it has any); ``False`` skips them.
    * ``deadline_ms``: return within this many milliseconds, whatever is slow (the embedding
      request, the store, the LLM): stages run in order of value and a stage that would overrun is
      skipped or abandoned; each :class:`~ctxret.results.Group` says what ran
      (``stages``, ``degraded``). See :mod:`ctxret.query.deadline`. ``None``: no deadline.

    * ``relevance``: the :class:`~ctxret.query.relevance.RelevanceCalibration` that turns a hit's
      cosine and lexical coverage into ``scores["relevance"]`` in [0, 1]; ``None`` = the
      embedder's (see :func:`~ctxret.query.relevance.calibration_for`). ``min_relevance``: hits
      under it are dropped (a floor on the scale the adapters show as ``score``).
    * ``rerank``: a callable ``(part, hits) -> scores`` (one float per hit, ``None`` drops it) run
      inside each group on its top ``rerank_candidates`` hits that passed the floors, before the cut
      to ``k``; the group is ordered by its scores (:mod:`ctxret.query.rerank`).
    * ``mmr``: maximal marginal relevance inside each group over its top ``fetch_k`` hits,
      ``lambda_mult`` from 0 (diverse) to 1 (relevant) (:mod:`ctxret.query.mmr`).

    * ``per``: what one hit is. ``"piece"`` (the default): a stored piece. ``"document"``: one hit per
      document (a chat turn is its own document), scored by :data:`~ctxret.query.documents.DEFAULT_RULE`
      over its pieces in the group, ``k`` documents per group; ``"section"``: the same per section (a
      document's turn). See :func:`~ctxret.query.documents.collapse_groups`.

    :meth:`with_options` takes the flat names every entry point uses (``fusion``,
    ``lexical_weight``, ``rrf_k``, ``candidates``, ``lexical_floor``, ``document_lexical_weight`` for the
    hybrid settings). The lexical weight follows what is asked for: 0.7 for a search of pieces, 0.5
    (``document_lexical_weight``) for one that ranks documents or sections (``per=``;
    :class:`~ctxret.query.fusion.FusionSettings`); ``lexical_weight=`` given alone sets both.

    * ``now``: the search's time (a datetime or an ISO-8601 string; ``None``: the current time), what
      "yesterday" or "last week" in a part are read against (:mod:`ctxret.query.time`).
    * ``since`` / ``until``: time bounds for every part, ``since <= timestamp < until`` (datetimes or
      ISO-8601 strings; naive ones are the store's own wall clock), applied inside the store's query.
    * ``time_windows``: a part that names a time ("what did Anna say yesterday?") searches only inside
      the window it names, widened by a day on each side (``False``: parts search as if they named none;
      ``"asking"``: only parts that ask — a question or a request — get their window).
      See docs/time.md.
    * ``recency_half_life``: ``None`` (the default: off) or a positive duration (a ``timedelta`` or seconds).
      When set, inside each group (after rerank, before MMR and the cut to ``k``, over at least
      ``rerank_candidates`` hits) each hit's ``score`` is multiplied by ``0.5 ** (age / recency_half_life)``
      (divided, for a negative score, so an older hit never moves up), age = ``now`` - the hit's stored
      ``timestamp`` (never negative); the group is re-ordered by it and ``scores["recency"]`` is the factor.
      A hit without a timestamp is not decayed (and gets no ``scores["recency"]``). See docs/time.md.
    * ``answers_first``: when a part asks, a stored question or request among its candidates lifts the reply that
      follows it in its turn right above it, at its score; the assistant's reply to the user goes right under it
      instead, at its own relevance (:mod:`ctxret.query.answers`). ``False``: off.
    * ``latest_first``: when a part asks how things are now, of two hits in its group about the same subject said at
      different times the later ranks directly above the earlier; nothing else moves (:mod:`ctxret.query.latest`).
      ``False``: off.
    * ``speakers_first``: when a part names exactly one of the speakers among its candidates ("How does Tim get to
      work?"), what that speaker said ranks above what others said among its first 10 candidates
      (:mod:`ctxret.query.speakers`). ``False``: off.
    * ``user_first``: in an agent's memory (a thread where the assistant speaks), when a part asks (not for an earlier
      state), the user's statements are the facts: of its first hits ranked nearly alike the newer first, the user's
      later statements of a subject among its first 10 candidates join the group above the earlier ones it holds, and
      a user's statement ranks above the assistant's words about the same subject (its echoes, its answers). Part of
      the ``latest`` stage, and off with ``latest_first=False`` (:mod:`ctxret.query.latest`). ``False``: off.

    Each field carries its :class:`~ctxret.query.options.Option` (help, flag, how a flag's text becomes a value):
    the one definition the CLI's search flags (``ctxret.cli.search_flags``) and the adapters' ``search_kwargs``
    checks (:func:`check_search_options`) are made from. A new option is a new field with ``option(...)``.
    """

    k: int = option(5, parse=parse_int, flags=("-k",), metavar="K", help="hits per part (per group), not in total")
    cosine_floor: float | None | Literal["auto"] = option(
        "auto",
        parse=partial(parse_float, none=True, auto=True),
        flags=("--cosine-floor", "--threshold"),
        metavar="COS",
        shown_default="auto: the embedder's",
        help="cosine floor: a part is empty unless one of its first hits clears it, hits are kept down to half of "
        "it; a number, 'none', or 'auto'",
    )
    max_parts: int = option(MAX_PARTS, parse=parse_int, metavar="N", help="at most N parts per message")
    split: bool = option(
        True, switch=True, help="split the message into parts (--no-split: one whole-message vector, the baseline)"
    )
    query_weight: float | None = option(
        OWN_WEIGHT,
        parse=partial(parse_float, none=True),
        metavar="W",
        help="blend weight of a part against its whole message, 0-1 ('none': the collection's weight)",
    )
    lexical: bool | None = option(
        None,
        switch=True,
        shown_default="on for an embedded or in-memory store, off for a Chroma server",
        help="hybrid search: BM25 per part fused with the dense search",
    )
    hybrid: FusionSettings = option(
        default_factory=FusionSettings,
        help="the fusion settings, set by their flat options: " + ", ".join(HYBRID_OPTIONS),
    )
    parents: bool = option(
        False,
        switch=True,
        help="attach each hit's whole turn or section (one hit per parent in a part; --json: parent_text)",
    )
    max_message_bytes: int | None = option(
        65_536,
        parse=partial(parse_int, none=True),
        metavar="BYTES",
        help="refuse a longer message (0 or 'none': no limit)",
    )
    relevance: RelevanceCalibration | None = option(
        None,
        parse=_calibration,
        metavar="NAME",
        shown_default="the embedder's",
        help="the relevance calibration: a fitted one by model id (" + ", ".join(FITTED) + ") or module:attribute",
    )
    min_relevance: float | None = option(
        None,
        parse=partial(parse_float, none=True),
        metavar="R",
        help="drop hits whose relevance (0-1, the score the adapters show) is under R",
    )
    rerank: Any = option(
        None,
        parse=parse_python,
        metavar="MODULE:FN",
        help="a callable (part, hits) -> scores run inside each group on its top --rerank-candidates hits",
    )
    rerank_candidates: int = option(
        DEFAULT_RERANK_CANDIDATES, parse=parse_int, metavar="N", help="hits per group handed to --rerank"
    )
    mmr: bool = option(False, switch=True, help="maximal marginal relevance inside each group")
    fetch_k: int = option(DEFAULT_FETCH_K, parse=parse_int, metavar="N", help="hits per group MMR chooses among")
    lambda_mult: float = option(
        DEFAULT_LAMBDA_MULT, parse=parse_float, metavar="L", help="MMR's trade-off, 0 (diverse) to 1 (relevant)"
    )
    hyde: Any = option(
        None,
        parse=parse_python,
        metavar="MODULE:FN",
        help="HyDE: a callable part -> hypothetical answer (or an LLM object); each part's vector is blended with "
        "its answer's",
    )
    hyde_weight: float = option(
        DEFAULT_HYDE_WEIGHT, parse=parse_float, metavar="W", help="the part's share against its HyDE answer, 0-1"
    )
    views: bool = option(True, switch=True, help="search the index's LLM-written views too (when it has any)")
    deadline_ms: float | None = option(
        None,
        parse=partial(parse_float, none=True),
        metavar="MS",
        shown_default="none",
        help="return within MS milliseconds: a stage that would overrun (lexical, views, parents) is skipped and "
        "the output says so",
    )
    now: Any = option(
        None,
        parse=parse_time,
        metavar="TIME",
        shown_default="the current time",
        help="the search's time, ISO 8601 (e.g. 2024-03-01T12:00): what 'yesterday' or 'last week' in the message "
        "are read against",
    )
    since: Any = option(None, parse=parse_time, metavar="TIME", help="only pieces stamped at or after TIME (ISO 8601)")
    until: Any = option(None, parse=parse_time, metavar="TIME", help="only pieces stamped before TIME (ISO 8601)")
    time_windows: bool | Literal["asking"] = option(
        True,
        parse=_time_windows,
        choices=("on", "off", "asking"),
        shown_default="on",
        help="a part that names a time searches inside its window ('asking': only parts that ask)",
    )
    recency_half_life: Any = option(
        None,
        parse=partial(parse_float, none=True),
        metavar="SECONDS",
        shown_default="off",
        help="blend recency into each part's order: a hit's score times 0.5 ** (age / SECONDS), e.g. 604800 for a "
        "week (see docs/time.md)",
    )
    answers_first: bool = option(
        True,
        switch=True,
        help="when a part asks, a stored question's answer ranks right above it (the assistant's reply: right "
        "under it)",
    )
    latest_first: bool = option(
        True, switch=True, help="when a part asks about now, the later of two hits about one subject ranks first"
    )
    speakers_first: bool = option(
        True, switch=True, help="when a part names one of the thread's speakers, what that speaker said ranks first"
    )
    user_first: bool = option(
        True,
        switch=True,
        help="in an agent's memory, the user's latest statement of a fact ranks first (reached beyond the group's "
        "first hits), above the assistant's words about it",
    )
    # per-document results (query/documents.py)
    per: str = option(
        "piece",
        parse=str,
        choices=PER_CHOICES,
        help="what one hit is: a stored piece, a section, or a document (one hit per document, scored by its best "
        "piece + 0.25 x its second best; -k documents per part)",
    )
    #: the adapters' relevance floor, resolved into ``min_relevance`` / ``cosine_floor`` (see above); never stored
    score_threshold: InitVar[Any] = ...

    def __post_init__(self, score_threshold: Any = ...) -> None:
        self._relevance_floor(score_threshold)
        self._check_group_stages()
        self._check_time()
        if self.per not in PER_CHOICES:
            raise InputError(f"per must be one of {', '.join(map(repr, PER_CHOICES))}, got {self.per!r}")
        object.__setattr__(self, "k", _positive_int(self.k, "k (results per part)"))
        object.__setattr__(self, "max_parts", _positive_int(self.max_parts, "max_parts"))
        object.__setattr__(self, "cosine_floor", _threshold(self.cosine_floor))
        for name in ("split", "parents", "views", "answers_first", "latest_first", "speakers_first", "user_first"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.lexical is not None and not isinstance(self.lexical, bool):
            raise InputError(f"lexical must be True, False or None, got {self.lexical!r}")
        qw = self.query_weight
        if qw is not None:
            if isinstance(qw, bool) or not isinstance(qw, (int, float)) or not 0.0 <= float(qw) <= 1.0:
                raise InputError(f"query_weight must be between 0 and 1 (or None: the collection's weight), got {qw!r}")
            object.__setattr__(self, "query_weight", float(qw))
        mb = self.max_message_bytes
        if mb is not None:  # 0: no limit, like None
            none = mb == 0 and not isinstance(mb, bool)
            object.__setattr__(self, "max_message_bytes", None if none else _positive_int(mb, "max_message_bytes"))
        if not isinstance(self.hybrid, FusionSettings):
            raise InputError(f"hybrid must be a FusionSettings, got {type(self.hybrid).__name__}")
        object.__setattr__(self, "hyde", as_hyde(self.hyde))
        hw = self.hyde_weight
        if isinstance(hw, bool) or not isinstance(hw, (int, float)) or not 0.0 <= float(hw) <= 1.0:
            raise InputError(
                f"hyde_weight (the part's share against its hypothetical answer) must be between 0 and 1, got {hw!r}"
            )
        object.__setattr__(self, "hyde_weight", float(hw))
        dl = self.deadline_ms
        if dl is not None:
            if isinstance(dl, bool) or not isinstance(dl, (int, float)) or not 0 < dl <= _MAX_DEADLINE_MS:
                raise InputError(
                    f"deadline_ms must be a positive number of milliseconds up to {_MAX_DEADLINE_MS:,} (or None: no "
                    f"deadline), got {dl!r}"
                )
            object.__setattr__(self, "deadline_ms", float(dl))

    def _relevance_floor(self, value: Any) -> None:
        """``score_threshold`` as the adapters mean it: a relevance floor (``None``: no floor at all)."""
        if value is ... or value == "auto":
            return
        if value is None:
            object.__setattr__(self, "min_relevance", None)
            if not isinstance(self.cosine_floor, (int, float)) or isinstance(self.cosine_floor, bool):
                object.__setattr__(self, "cosine_floor", None)
            return
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0.0 <= value <= 1.0:
            raise InputError(
                f"score_threshold is a floor on the relevance in [0, 1], the score the adapters show ('auto': none, "
                f"None: no floor at all; the cosine floor is cosine_floor=), got {value!r}"
            )
        object.__setattr__(self, "min_relevance", float(value))

    def _check_group_stages(self) -> None:
        if self.relevance is not None and not isinstance(self.relevance, RelevanceCalibration):
            raise InputError(f"relevance must be a RelevanceCalibration or None, got {type(self.relevance).__name__}")
        mr = self.min_relevance
        if mr is not None:
            if isinstance(mr, bool) or not isinstance(mr, (int, float, np.floating)) or not 0.0 <= float(mr) <= 1.0:
                raise InputError(f"min_relevance is a relevance floor between 0 and 1 (or None), got {mr!r}")
            object.__setattr__(self, "min_relevance", float(mr))
        check_reranker(self.rerank)
        object.__setattr__(self, "rerank_candidates", _positive_int(self.rerank_candidates, "rerank_candidates"))
        if not isinstance(self.mmr, bool):
            raise InputError(f"mmr must be True or False, got {self.mmr!r}")
        object.__setattr__(self, "fetch_k", check_fetch_k(self.fetch_k))
        object.__setattr__(self, "lambda_mult", check_lambda_mult(self.lambda_mult))

    def _check_time(self) -> None:
        object.__setattr__(self, "recency_half_life", _half_life(self.recency_half_life))
        if not (isinstance(self.time_windows, bool) or self.time_windows == "asking"):
            raise InputError(f"time_windows must be True, False or 'asking', got {self.time_windows!r}")
        if self.now is not None:
            object.__setattr__(self, "now", _moment(self.now, "now"))
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _moment(value, name))
        since, until = self.since, self.until
        if since is not None and until is not None:
            if (since.tzinfo is None) != (until.tzinfo is None):
                raise InputError(
                    f"since ({since.isoformat()}) and until ({until.isoformat()}) must both carry a time zone or "
                    "both be naive (the store's wall clock)"
                )
            if since >= until:
                raise InputError(
                    f"since ({since.isoformat()}) must be before until ({until.isoformat()}); the window would be empty"
                )

    #: Flat option names that set a field of :attr:`hybrid`.
    HYBRID_OPTIONS = HYBRID_OPTIONS

    @classmethod
    def option_names(cls) -> list[str]:
        """Every keyword :meth:`with_options` accepts."""
        names = [f.name for f in fields(cls) if f.name != "hybrid"]
        return names + ["score_threshold"] + list(cls.HYBRID_OPTIONS) + ["hybrid"]

    def with_options(self, **options: Any) -> SearchSettings:
        """A copy with ``options`` applied; an unknown option is an error naming the valid ones."""
        if not options:
            return self
        unknown = sorted(set(options) - set(self.option_names()))
        if unknown:
            raise InputError(f"unknown search option(s) {unknown}; valid options: {', '.join(self.option_names())}")
        hybrid_changes = {self.HYBRID_OPTIONS[k]: v for k, v in options.items() if k in self.HYBRID_OPTIONS}
        direct = {k: v for k, v in options.items() if k not in self.HYBRID_OPTIONS}
        hybrid = direct.pop("hybrid", self.hybrid)
        # None keeps the current value, except for lexical_floor where None means "no lexical rescue"
        hybrid_changes = {k: v for k, v in hybrid_changes.items() if v is not None or k == "lexical_floor"}
        if "lexical_weight" in hybrid_changes and "document_lexical_weight" not in hybrid_changes:
            # one number means one weight: a caller's lexical_weight= alone applies to documents' pieces too
            hybrid_changes["document_lexical_weight"] = hybrid_changes["lexical_weight"]
        if hybrid_changes:
            if not isinstance(hybrid, FusionSettings):
                raise InputError(f"hybrid must be a FusionSettings, got {type(hybrid).__name__}")
            hybrid = replace(hybrid, **hybrid_changes)
        return replace(self, hybrid=hybrid, **direct)


def search_options() -> list[tuple[str, Option]]:
    """Every search option (each keyword :meth:`SearchSettings.with_options` takes but ``hybrid``, which its flat
    options set) with its :class:`~ctxret.query.options.Option`, in the settings' order: what the CLI's search flags
    are generated from."""
    from .fusion import FusionSettings

    fusion = {f.name: option_of(f) for f in fields(FusionSettings)}
    out: list[tuple[str, Option]] = []
    for f in fields(SearchSettings):
        spec = option_of(f)
        if spec is None:
            raise TypeError(f"SearchSettings.{f.name} has no option metadata: give it option(...)")
        if f.name == "hybrid":
            out += [(flat, fusion[name]) for flat, name in HYBRID_OPTIONS.items()]  # type: ignore[misc]
            continue
        out.append((f.name, spec))
        if f.name == "min_relevance":
            out.append(("score_threshold", SCORE_THRESHOLD))
    return out


def check_search_keys(keys: Iterable[str], *, extra: Iterable[str] = (), what: str = "search_kwargs") -> None:
    """Refuse a key that is neither a search option (:meth:`SearchSettings.option_names`) nor one of ``extra`` (the
    caller's own keys, e.g. ``thread_id``, ``where``): the error names it and every accepted key."""
    names = SearchSettings.option_names()
    accepted = [*names, *(e for e in extra if e not in names)]
    unknown = sorted({k for k in keys if k not in accepted})
    if unknown:
        raise InputError(
            f"{what}: unknown search option(s) {', '.join(map(repr, unknown))}; accepted keys: {', '.join(accepted)}"
        )


def check_search_options(
    options: Mapping[str, Any],
    *,
    extra: Iterable[str] = (),
    what: str = "search_kwargs",
    settings: SearchSettings | None = None,
) -> SearchSettings:
    """``options`` checked as search options (an adapter's ``search_kwargs``): the keys by
    :func:`check_search_keys`, each value by the settings' own check (an :class:`InputError` naming the option and
    what it takes). Returns ``settings`` (default: the defaults) with the options (not those of ``extra``)
    applied."""
    check_search_keys(options, extra=extra, what=what)
    names = SearchSettings.option_names()
    return (settings or SearchSettings()).with_options(**{k: v for k, v in options.items() if k in names})


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_INT:
        raise InputError(f"{name} must be a positive integer (at most {MAX_INT:,}), got {value!r}")
    return int(value)


def _half_life(value: Any) -> float | None:
    """``recency_half_life`` as positive seconds (``None``: off); anything else an InputError naming it."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float, np.integer, np.floating))
        or not math.isfinite(float(seconds))
        or float(seconds) <= 0
    ):
        raise InputError(
            "recency_half_life must be a positive duration (a datetime.timedelta or a number of seconds, e.g. "
            f"604800 for a week) or None (no recency), got {value!r}"
        )
    return float(seconds)


def _moment(value: Any, name: str) -> datetime:
    """A time option as a datetime: a datetime as given, an ISO-8601 string parsed (an InputError naming ``name``)."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, str) and value.strip():
        from ..ingest.turns import parse_time

        parsed = parse_time(value.strip(), name)  # an InputError naming the option
        if parsed is not None:
            return parsed
    raise InputError(f"{name} must be a datetime or an ISO-8601 string (e.g. '2026-10-16T14:02:00'), got {value!r}")


def _threshold(value: Any) -> float | None | Literal["auto"]:
    if value is None or value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not math.isfinite(float(value)):
        raise InputError(f"cosine_floor must be a cosine between -1 and 1, 'auto' or None, got {value!r}")
    if not -1.0 <= float(value) <= 1.0:
        raise InputError(f"cosine_floor is a cosine floor between -1 and 1, got {value!r}")
    return float(value)
