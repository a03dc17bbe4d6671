"""LlamaIndex documents ⇄ ctxret turns and pieces, and the node parser built on them.

Nothing here chunks, labels or embeds: documents become core turns (:func:`ctxret.ingest.documents.document_turns`
for text, :func:`ctxret.ingest.messages.turns_from_messages` for chats), turns become the core's labelled pieces
(:func:`ctxret.ingest.turns.label_pieces`, or ``ContextualIndex.fit_pieces`` when an index is given), and each
piece becomes one ``TextNode`` whose id, text and metadata are the piece's as the core stores it.

A LlamaIndex ``Document`` is read as:

* a **chat** when its metadata has ``"messages"``: OpenAI chat-completions dicts (a list, or that
  list as a JSON string). ``metadata["thread_id"]`` / ``metadata["first_turn"]`` scope and number
  the turns (see :func:`documents_from_messages`). The document's text is not read.
* a **text / markdown document** otherwise: split into sections by the core. The document id is
  ``metadata["doc_id"]``, else an id you set (``Document(id_=...)`` or a reader's
  ``filename_as_id=True``), else the core's default (the title, else a hash of the text) — never
  LlamaIndex's random ``id_``: such a Document takes the stored id as its ``id_`` when it is parsed
  or indexed (:func:`adopt_ref_id`), so ``node.ref_doc_id == doc.id_``. ``metadata["title"]`` is
  the title shown in headers (else the file name a reader gives, ``metadata["file_name"]`` or the end of
  ``metadata["file_path"]``: :func:`file_title`; the document id stays what it was without it) and
  ``metadata["thread_id"]`` the search scope (default: the document id).

Every other metadata key is the caller's: it is written on each piece (flattened the way the core
flattens it). ``Document(text, metadata={"title": T, "doc_id": I, **rest})`` gives exactly the
pieces of ``index.add_documents([{"text": text, "title": T, "id": I, "metadata": rest}])``,
as does ``Document(text, id_=I, metadata={"title": T, **rest})`` (the mapping
``langchain_ctxret.ContextualRetriever.add_documents`` uses with ``Document.id``); a chat document
gives those of its messages written as given, as numbered turns from ``first_turn``
(``index.add_turns(turns_from_messages(messages, thread_id, first_turn=...), metadata=rest)``): a
document is a whole thread, parsed the same way every time. To append messages as they happen
(``ContextualIndex.add_messages``), use :class:`~llamaindex_ctxret.CtxretMemoryBlock`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Any

from ctxret import ContextualIndex, IndexResult, InputError
from ctxret.adapters import (
    FIELD_PREFIX,
    MIN_BODY_BYTES,
    RETRIEVAL_KEYS,
    SHARED_KEYS,
    Piece,
    Turn,
    caller_keys,
    document_turns,
    label_pieces,
    piece_metadata,
    progress_option,
    turns_from_messages,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.node_parser.interface import NodeParser
from llama_index.core.schema import BaseNode, Document, MetadataMode, NodeRelationship, TextNode
from llama_index.core.utils import get_tqdm_iterable

__all__ = [
    "CHAT_KEYS",
    "DOCUMENT_KEYS",
    "RETRIEVAL_KEYS",
    "ContextualNodeParser",
    "add_documents_to_index",
    "adopt_ref_id",
    "document_ref_id",
    "index_documents",
    "stored_ref_id",
    "documents_from_messages",
    "documents_to_turns",
    "piece_node",
]

#: Metadata keys of a chat ``Document`` that steer ingestion (not written on the pieces).
CHAT_KEYS = ("messages", "thread_id", "first_turn")
#: Metadata keys of a text ``Document`` that steer ingestion (not written on the pieces).
DOCUMENT_KEYS = ("doc_id", "title", "thread_id")
_SCORE_PREFIX = "score_"


# -- documents → turns ----------------------------------------------------------------------------
def documents_from_messages(
    messages: Iterable[Mapping[str, Any]],
    thread_id: str = "default",
    *,
    first_turn: int = 1,
    metadata: Mapping[str, Any] | None = None,
) -> list[Document]:
    """One chat ``Document`` holding OpenAI chat-completions ``messages`` for the node parser.

    The messages are kept as given in ``metadata["messages"]`` (excluded from embedding and LLM
    text); the document's text is a readable transcript of the turns, for people and logs only.
    ``metadata`` becomes caller metadata on every piece. Raises :class:`ctxret.InputError` for
    messages the core cannot read (checked here, not later in a pipeline).
    """
    messages = list(messages)
    turns = turns_from_messages(messages, thread_id, first_turn=first_turn, include_system=True)
    meta = dict(metadata or {})
    clash = sorted(set(meta) & set(CHAT_KEYS))
    if clash:
        raise InputError(f"metadata keys {clash} are set by documents_from_messages; pass them as arguments")
    meta.update({"messages": messages, "thread_id": thread_id, "first_turn": first_turn})
    text = "\n\n".join(f"{t.label}\n{t.text}" for t in turns)
    doc_id = f"chat:{thread_id}" if first_turn == 1 else f"chat:{thread_id}@{first_turn}"
    return [
        Document(
            id_=doc_id,
            text=text,
            metadata=meta,
            excluded_embed_metadata_keys=list(meta),
            excluded_llm_metadata_keys=list(meta),
        )
    ]


def documents_to_turns(
    documents: Iterable[BaseNode],
    *,
    thread_id: str | None = None,
    include_system: bool = False,
    include_metadata: bool = True,
) -> list[list[Turn]]:
    """The core turns of each LlamaIndex document (one list per document, in input order).

    ``thread_id`` is used when a document's metadata has none (chats then default to
    ``"default"``, text documents to their document id). ``include_metadata=False`` leaves the
    documents' other metadata off the pieces.
    """
    return [
        _turns_of(
            doc,
            thread_id=thread_id,
            include_system=include_system,
            include_metadata=include_metadata,
        )
        for doc in documents
    ]


def _turns_of(node: BaseNode, *, thread_id: str | None, include_system: bool, include_metadata: bool) -> list[Turn]:
    if not isinstance(node, BaseNode):
        raise InputError(f"expected LlamaIndex Documents (or nodes), got {type(node).__name__}")
    meta = dict(node.metadata or {})
    if "turn_id" in meta and "header" in meta:
        raise InputError(
            f"node {node.node_id!r} is already a ctxret piece (it has 'turn_id' and 'header'); "
            "pass the source Documents, not the parser's output nodes"
        )
    if "messages" in meta:
        messages = meta["messages"]
        if isinstance(messages, str):
            try:
                messages = json.loads(messages)
            except ValueError as e:
                raise InputError(f"document {node.node_id!r}: metadata['messages'] is a string but not JSON") from e
        first = meta.get("first_turn", 1)
        if isinstance(first, bool) or not isinstance(first, int) or first < 1:
            raise InputError(
                f"document {node.node_id!r}: metadata['first_turn'] must be a positive integer, got {first!r}"
            )
        thread = _thread_of(meta, thread_id) or "default"
        turns = turns_from_messages(messages, str(thread), first_turn=first, include_system=include_system)
        caller = {k: v for k, v in meta.items() if k not in CHAT_KEYS} if include_metadata else {}
        # what ContextualIndex.add_turns(turns, metadata=caller) does with its ``metadata``
        return [replace(t, metadata={**caller, **dict(t.metadata)}) for t in turns] if caller else turns
    text, title, doc_id, thread = _document_fields(node, thread_id)
    caller = {k: v for k, v in meta.items() if k not in DOCUMENT_KEYS} if include_metadata else {}
    shown = title or file_title(meta)
    if shown != title:  # a reader's file name names the document in headers; its id stays the one it always had
        from ctxret.adapters import document_id

        doc_id = doc_id if doc_id is not None else document_id(text, title)
    return document_turns(text, title=shown, doc_id=doc_id, thread_id=thread, metadata=caller)


def file_title(meta: Mapping[str, Any]) -> str | None:
    """The name a LlamaIndex reader gives a document's file (``SimpleDirectoryReader`` and most file readers:
    ``metadata["file_name"]``, else the last part of ``metadata["file_path"]``), which names it in its pieces'
    headers when it has no ``title``; ``None`` when neither is there."""
    name = meta.get("file_name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    path = meta.get("file_path")
    if isinstance(path, str) and path.strip():
        return path.strip().replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or None
    return None


def _document_fields(node: BaseNode, thread_id: str | None) -> tuple[str, str | None, str | None, str | None]:
    """``(text, title, doc_id, thread_id)`` of a text document (``None``: the core's default)."""
    meta = node.metadata or {}
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    title = meta.get("title") or None
    # An id the caller chose (``Document(id_=...)``, ``filename_as_id=True``) is the document id;
    # LlamaIndex's random default is not (re-adding the same text must find the same pieces).
    doc_id = meta.get("doc_id") or (node.id_ if "id_" in node.model_fields_set else None)
    thread = _thread_of(meta, thread_id)
    return (
        text,
        str(title) if title is not None else None,
        str(doc_id) if doc_id is not None else None,
        str(thread) if thread is not None else None,
    )


def document_ref_id(node: BaseNode, thread_id: str | None = None) -> str:
    """The id ctxret stores a LlamaIndex document under, its ``ref_doc_id``: ``metadata["doc_id"]``, else an ``id_``
    you chose (``Document(id_=...)``, ``filename_as_id=True``), else the content id (a hash of title and text, the
    core's and LangChain's default: the same text is one document whichever adapter wrote it); a chat document's is
    ``chat:<thread_id>`` (``@<first_turn>`` for a slice)."""
    from ctxret.adapters import document_id

    meta = node.metadata or {}
    if "messages" in meta:
        thread, first = meta.get("thread_id") or "default", meta.get("first_turn", 1)
        return f"chat:{thread}" if first == 1 else f"chat:{thread}@{first}"
    text, title, doc_id, _ = _document_fields(node, thread_id)
    return doc_id if doc_id is not None else document_id(text, title)


def adopt_ref_id(node: BaseNode, thread_id: str | None = None) -> str:
    """:func:`document_ref_id`, which a Document whose ``id_`` nobody chose (LlamaIndex's random default) takes as its
    ``id_``: afterwards ``doc.id_`` is what ``node.ref_doc_id``, ``delete_ref_doc`` and ``ref_doc_info`` know it by."""
    ref = document_ref_id(node, thread_id)
    if node.id_ != ref and "id_" not in node.model_fields_set:
        node.id_ = ref
    return ref


def stored_ref_id(meta: Mapping[str, Any]) -> str:
    """The ``ref_doc_id`` of a stored piece, from its metadata (see :func:`document_ref_id`)."""
    doc = meta.get("doc_id")
    return str(doc) if doc is not None else f"chat:{meta.get('thread_id', 'default')}"


def _thread_of(meta: Mapping[str, Any], thread_id: str | None) -> Any:
    """The thread a document names in its metadata, else ``thread_id``; an empty one is the core's error
    (never silently another thread)."""
    return meta["thread_id"] if meta.get("thread_id") is not None else thread_id


# -- pieces → nodes -------------------------------------------------------------------------------
def _llm_excluded(metadata: Mapping[str, Any]) -> list[str]:
    """All keys but the caller's own: the header is already in the text, the rest is bookkeeping. ``metadata`` is a
    piece as stored (its ``caller_keys`` name the caller's) or as a search returns it (ctxret's fields are
    ``ctxret:<field>``, :func:`ctxret.storage.schema.public_metadata`)."""
    if "caller_keys" in metadata or not any(k.startswith(FIELD_PREFIX) for k in metadata):
        caller = set(caller_keys(metadata)) - SHARED_KEYS
    else:
        caller = {k for k in metadata if not k.startswith(FIELD_PREFIX) and k not in SHARED_KEYS}
    return sorted(k for k in metadata if k not in caller or k in RETRIEVAL_KEYS or k.startswith(_SCORE_PREFIX))


def piece_node(piece_id: str, text: str, metadata: Mapping[str, Any]) -> TextNode:
    """A ``TextNode`` for one stored piece: id, text (header + body) and the core's metadata.

    Embed mode shows the text alone, which is exactly what the core embeds (the header is in it
    once). LLM mode shows the text plus the caller's own metadata keys (``caller_keys``);
    ctxret's bookkeeping keys and retrieval keys are hidden from both.
    """
    meta = dict(metadata)
    return TextNode(
        id_=piece_id,
        text=text,
        metadata=meta,
        excluded_embed_metadata_keys=sorted(meta),
        excluded_llm_metadata_keys=_llm_excluded(meta),
    )


# -- the node parser ------------------------------------------------------------------------------
class ContextualNodeParser(NodeParser):
    """Documents → the core's labelled pieces, one ``TextNode`` per piece (node id = piece id).

    Example:
        ```python
        from llama_index.core import Document
        from llamaindex_ctxret import ContextualNodeParser

        docs = [Document(text="Staff get 30 days of leave.", id_="leave"), Document(text="Book trains.", id_="travel")]
        nodes = ContextualNodeParser().get_nodes_from_documents(docs)
        print(len(nodes), nodes[1].text.splitlines()[-1])  # prints: 2 Book trains.
        ```

    In an ``IngestionPipeline``: ``IngestionPipeline(transformations=[ContextualNodeParser()]).run(documents=docs)``.

    Each node's text is the piece's (header + body), its metadata the core's piece metadata
    (``thread_id``, ``turn_id``, ``turn_label``, ``source_label``, ``header``, ``timestamp``, …,
    plus the document's own metadata), its SOURCE the input document and PREVIOUS/NEXT the pieces
    before/after it in the same document. See the module docstring for how documents are read.

    Args:
        piece_bytes: byte budget per piece, header included (the core's ``piece_bytes``; 600 is
            the local model's). Ignored with ``index``: the index's own value is used.
        thread_id: search scope for documents whose metadata has no ``thread_id``.
        include_system: index system/developer messages of chats.
        index: a :class:`ctxret.ContextualIndex` whose settings the pieces must match: its
            ``piece_bytes``, and pieces over its embedder's token limit re-packed the way the
            index does (``ContextualIndex.fit_pieces``). Without it, pieces are labelled at
            ``piece_bytes`` and not token-checked; they equal the index's whenever no piece is
            over the model's limit (always for prose at the default sizes). Not serialised;
            its relevant config is recorded in ``index_config`` so cached runs see the change.

    ``id_func`` (a base-class field) is not used: node ids are always piece ids.

    To write the same pieces with their blended vectors, pass the same documents to
    :func:`add_documents_to_index` (the core's write path); node ids then equal stored ids.
    """

    piece_bytes: int = Field(default=600, ge=MIN_BODY_BYTES + 64, description="Piece byte budget, header included.")
    thread_id: str | None = Field(default=None, description="Search scope for documents without metadata['thread_id'].")
    include_system: bool = Field(default=False, description="Index system/developer messages of chats.")
    index_config: dict[str, Any] | None = Field(
        default=None, description="Config of the index the pieces are fitted to (set from index=)."
    )
    _index: ContextualIndex | None = PrivateAttr(default=None)

    def __init__(self, *, index: ContextualIndex | None = None, **data: Any) -> None:
        # Node ids are piece ids, so the base class's ``id_func`` is never called. ``to_dict``
        # writes it as a dict the base field cannot read back; dropping it makes from_dict work.
        if isinstance(data.get("id_func"), Mapping):
            del data["id_func"]
        if index is not None:
            if not isinstance(index, ContextualIndex):
                raise InputError(f"index must be a ctxret.ContextualIndex, got {type(index).__name__}")
            asked = data.get("piece_bytes")
            if asked is not None and int(asked) != index.piece_bytes:
                raise InputError(
                    f"piece_bytes={asked} differs from the index's {index.piece_bytes}; "
                    "leave piece_bytes out when you pass index= (the index's value is used)"
                )
            data["piece_bytes"] = index.piece_bytes
            data["index_config"] = {
                "model_id": index.config.model_id,
                "max_tokens": index.config.max_tokens,
                "piece_bytes": index.piece_bytes,
                "packer": index.config.packer,
            }
        super().__init__(**data)
        self._index = index

    @classmethod
    def from_index(cls, index: ContextualIndex, **kwargs: Any) -> ContextualNodeParser:
        """A parser whose pieces match ``index`` exactly (see ``index`` above)."""
        return cls(index=index, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "ContextualNodeParser"

    def _pieces(self, turn: Turn) -> list[Piece]:
        if self._index is not None:
            return self._index.fit_pieces(turn, self.piece_bytes)
        return label_pieces(turn, self.piece_bytes)

    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> list[BaseNode]:
        out: list[BaseNode] = []
        for doc in get_tqdm_iterable(nodes, show_progress, "Parsing documents"):
            turns = _turns_of(
                doc,
                thread_id=self.thread_id,
                include_system=self.include_system,
                include_metadata=self.include_metadata,
            )
            adopt_ref_id(doc, self.thread_id)
            source = doc.as_related_node_info()
            for turn in turns:
                for piece in self._pieces(turn):
                    node = piece_node(piece.id, piece.text, piece_metadata(turn, piece))
                    node.relationships[NodeRelationship.SOURCE] = source
                    out.append(node)
        return out

    def _postprocess_parsed_nodes(self, nodes: list[BaseNode], parent_doc_map: dict[str, Document]) -> list[BaseNode]:
        # Replaces the base class's step: its metadata merge would copy the document's steering
        # keys (e.g. the whole ``messages`` list) onto every piece, and its character offsets
        # cannot be found for texts that start with a header. Only PREVIOUS/NEXT are set here.
        if not self.include_prev_next_rel:
            return nodes
        for prev, node in pairwise(nodes):
            if prev.ref_doc_id is not None and prev.ref_doc_id == node.ref_doc_id:
                prev.relationships[NodeRelationship.NEXT] = node.as_related_node_info()
                node.relationships[NodeRelationship.PREVIOUS] = prev.as_related_node_info()
        return nodes


# -- writing --------------------------------------------------------------------------------------
def add_documents_to_index(
    index: ContextualIndex,
    documents: Iterable[BaseNode],
    *,
    thread_id: str | None = None,
    include_system: bool = False,
    include_metadata: bool = True,
    replace: bool = True,
    show_progress: bool | None = None,
) -> IndexResult:
    """Index LlamaIndex documents (text or chat) through the core's one write path.

    The documents are read exactly as :class:`ContextualNodeParser` reads them and handed to
    ``index.add_turns``: the stored pieces (ids, texts, metadata) are the parser's nodes, with
    their blended vectors, in the collection format every ctxret front end reads. Unchanged turns
    cost nothing; a changed turn replaces its old pieces; a text document replaces its stored
    version whole (sections it no longer has are removed) unless ``replace=False``. ``show_progress``: a progress
    bar (``None``: the index's setting, by default on a terminal or in a notebook; ``True`` always; ``False`` never).
    """
    return index_documents(
        index,
        documents,
        thread_id=thread_id,
        include_system=include_system,
        include_metadata=include_metadata,
        replace=replace,
        show_progress=show_progress,
    )[0]


def index_documents(
    index: ContextualIndex,
    documents: Iterable[BaseNode],
    *,
    thread_id: str | None = None,
    include_system: bool = False,
    include_metadata: bool = True,
    replace: bool = True,
    show_progress: bool | None = None,
) -> tuple[IndexResult, list[bool]]:
    """:func:`add_documents_to_index`, and for each document whether anything of it was written or removed."""
    from ctxret.adapters import document_key

    if isinstance(documents, BaseNode):
        documents = [documents]
    documents = list(documents)
    for doc in documents:
        if isinstance(doc, BaseNode):
            adopt_ref_id(doc, thread_id)
    per_doc = documents_to_turns(
        documents,
        thread_id=thread_id,
        include_system=include_system,
        include_metadata=include_metadata,
    )
    units: list[set[tuple[str, str]]] = []  # what each document writes, as IndexResult.changed names it
    replaced: list[tuple[str, str]] = []
    for doc, turns in zip(documents, per_doc, strict=True):
        if "messages" in (doc.metadata or {}):
            units.append({(t.thread_id, t.turn_id) for t in turns})
            continue
        text, title, doc_id, thread = _document_fields(doc, thread_id)
        key = document_key(text, title, doc_id, thread)
        replaced.append(key)
        units.append({key} if replace else {(t.thread_id, t.turn_id) for t in turns})
    result = index.add_turns(
        [t for turns in per_doc for t in turns],
        replace=replace,
        documents=replaced,
        progress=progress_option(show_progress=show_progress),
    )
    changed = set(result.changed)
    return result, [bool(u & changed) for u in units]
