"""A subprocess for the fault-injection tests: one operation on an embedded store, then exit.

    python faults_worker.py STORE setup|write|bulk|append|delete|rebuild|compact|check|long|replace

``CTXRET_TEST_LEXICAL=0`` opens the store with ``lexical=False`` (its writes announced in the journal file).

``CTXRET_FAULT_AT`` (see ``ctxret._faults``) kills the process at a named step of the operation.
``check`` opens the store (which repairs or finishes what a kill cut off) and prints its state as JSON.
"""

from __future__ import annotations

import json
import os
import sys

from ctxret import ContextualIndex


def thread(name: str, version: int) -> list[dict[str, str]]:
    turns = [
        (
            f"{name}: what is the plan for sprint {i}?",
            f"{name} sprint {i}: ship the importer, then the exporter, review on day {i}.",
        )
        for i in range(1, 5)
    ]
    if version == 2:  # turn 2 changed, a fifth turn added
        turns[1] = (f"{name}: sprint 2 moved.", f"{name} sprint 2 now starts on Wednesday with the billing fix.")
        turns.append((f"{name}: and sprint 5?", f"{name} sprint 5 is the migration to the new cluster."))
    out: list[dict[str, str]] = []
    for i, (user, assistant) in enumerate(turns):  # timed: the same pieces in every run
        at = f"2026-03-0{i + 1}T09:00:00"
        out += [
            {"role": "user", "content": user, "timestamp": at},
            {"role": "assistant", "content": assistant, "timestamp": at},
        ]
    return out


def main(store: str, op: str) -> None:
    if op == "rebuild":
        ContextualIndex.rebuild(store, weight=0.7, lexical=os.environ.get("CTXRET_TEST_LEXICAL") != "0")
        return
    index = ContextualIndex(store, lexical=os.environ.get("CTXRET_TEST_LEXICAL") != "0")
    index.store.chroma.max_batch = 3  # several Chroma calls per write: a kill can fall between two of them
    if op == "setup":
        index.add_messages(thread("alpha", 1), thread_id="alpha")
        index.add_messages(thread("bravo", 1), thread_id="bravo")
        index.add_documents({"id": "runbook.md", "text": RUNBOOK_V1})
    elif op == "write":  # one changed turn, a new turn, a new thread, a document that lost a section
        from ctxret.ingest import document_turns

        index.add_turns(
            [
                *index_turns("alpha", 2),
                *index_turns("charlie", 1),
                *document_turns(RUNBOOK_V2, doc_id="runbook.md"),
            ]
        )
    elif op == "bulk":  # five threads in one call, cut into small write batches (each overlapping the next embedding)
        from ctxret.ingest import writer

        writer.WRITE_BATCH_PIECES = 4
        index.add_turns([t for name, version in BULK for t in index_turns(name, version)])
    elif op == "append":  # one add_messages call: the last turn continued, then a new exchange
        index.add_messages(APPEND, thread_id="alpha")
    elif op == "delete":
        index.delete(thread_id="bravo")
    elif op == "compact":  # the live pieces copied into a new collection and swapped in
        index.store.compact()
    elif op == "long":  # a thread of 12 turns (what `replace` rewrites)
        index.add_messages(long_thread(0, 12), thread_id="long")
    elif op == "replace":  # the thread rewritten shorter: 6 new turns, turns 7-12 removed
        index.replace_messages(long_thread(1, 6), thread_id="long")
    elif op == "check":
        store_ = index.store
        chroma = sorted(r["id"] for r in store_.records(include=()))
        lexical = sorted(store_.lexical.ids()) if store_.lexical is not None else None
        print(
            json.dumps(
                {
                    "chroma": chroma,
                    "lexical": lexical,
                    "pending": store_.lexical.journal.pending if store_.lexical is not None else None,
                    "collections": store_.chroma.names(),
                    "weight": index.config.weight,
                    "threads": sorted({str(r["metadata"]["thread_id"]) for r in store_.records()}),
                    "turns": turns_of(store_),
                    "copy_differs": copy_differs(store_),
                }
            )
        )
    else:
        raise SystemExit(f"unknown operation {op!r}")
    index.close()


BULK = (("alpha", 2), ("bravo", 2), ("charlie", 1), ("delta", 1), ("echo", 1))
APPEND = [
    {
        "role": "assistant",
        "content": "alpha: also, sprint 4 needs a second reviewer.",
        "id": "alpha-4b",
        "timestamp": "2026-03-04T09:05:00",
    },
    {"role": "user", "content": "alpha: who reviews sprint 5?", "id": "alpha-5u", "timestamp": "2026-03-05T09:00:00"},
    {
        "role": "assistant",
        "content": "alpha: Dana reviews sprint 5, then ships it.",
        "id": "alpha-5a",
        "timestamp": "2026-03-05T09:01:00",
    },
]
RUNBOOK_V1 = (
    "# Runbook\n\n## Deploys\nDeploy with make ship.\n\n## Rollback\nRoll back with make undo.\n\n"
    "## Access\nThe admin password is in Vault under ops/admin.\n"
)
RUNBOOK_V2 = (
    "# Runbook\n\n## Deploys\nDeploy with make ship, then watch the dashboards.\n\n"
    "## Rollback\nRoll back with make undo.\n"
)


def long_thread(version: int, turns: int) -> list[dict[str, str]]:
    """A thread whose every message names its version (``v<version>``): a thread holding two versions shows two."""
    return [
        {"role": "user", "content": f"v{version} turn {i}: the deploy window of week {i} is {version + i} o'clock."}
        for i in range(1, turns + 1)
    ]


def copy_differs(store) -> list[str]:
    """Ids whose document and metadata in the lexical file's copy are not what Chroma holds."""
    held = {
        r["id"]: (r["document"] or "", dict(r["metadata"] or {}))
        for r in store.chroma.iter_records(None, include=("documents", "metadatas"))
    }
    copy = store.lexical.copies.stored(list(held)) if store.lexical is not None else {}
    if copy is None:
        return ["(pending)"]
    return sorted(i for i in held if i not in copy or copy[i] != held[i])


def turns_of(store) -> dict[str, list[str]]:
    """The stored piece ids of each turn, ``thread/turn`` -> sorted ids."""
    out: dict[str, list[str]] = {}
    for r in store.records():
        out.setdefault(f"{r['metadata']['thread_id']}/{r['metadata']['turn_id']}", []).append(r["id"])
    return {k: sorted(v) for k, v in sorted(out.items())}


def index_turns(name: str, version: int):
    from ctxret.ingest import turns_from_messages

    return turns_from_messages(thread(name, version), name)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
