"""ctxret.documents: text or markdown → sections (heading paths, or paragraphs packed by size)."""

from __future__ import annotations

import pytest
from ctxret import InputError
from ctxret.ingest.documents import SECTION_MAX_BYTES, document_id, document_turns, split_sections
from ctxret.ingest.turns import label_pieces

RUNBOOK = """\
This runbook is for the on-call engineer.

# Deploys
How we deploy: merge, tag, wait for CI.

## Rollback
Roll back with the previous tag.
```bash
# not a heading: a shell comment
git checkout v1.2.2
```

## Canary
Send 5% of traffic first.

# Monitoring
Dashboards live in Grafana.
"""


def nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


# --------------------------------------------------------------------------- split_sections


def test_markdown_headings_become_sections_with_heading_paths():
    assert split_sections(RUNBOOK) == [
        (None, "This runbook is for the on-call engineer."),
        ("Deploys", "How we deploy: merge, tag, wait for CI."),
        (
            "Deploys › Rollback",
            "Roll back with the previous tag.\n```bash\n# not a heading: a shell comment\ngit checkout v1.2.2\n```",
        ),
        ("Deploys › Canary", "Send 5% of traffic first."),
        ("Monitoring", "Dashboards live in Grafana."),
    ]


def test_headings_inside_code_fences_are_ignored():
    text = "# Real\nbefore\n~~~\n# fake\n## also fake\n~~~\nafter\n```\n### fake too\n```\n"
    sections = split_sections(text)
    assert [h for h, _ in sections] == ["Real"]
    assert "# fake" in sections[0][1] and "### fake too" in sections[0][1] and "after" in sections[0][1]


def test_text_before_the_first_heading_is_its_own_section():
    sections = split_sections("Preface line.\n\nMore preface.\n# One\nbody one\n")
    assert sections == [(None, "Preface line.\n\nMore preface."), ("One", "body one")]


def test_deep_heading_paths_and_going_back_up():
    text = "# A\na\n## B\nb\n### C\nc\n## D\nd\n# E\ne\n### F\nf\n"
    assert split_sections(text) == [
        ("A", "a"),
        ("A › B", "b"),
        ("A › B › C", "c"),
        ("A › D", "d"),
        ("E", "e"),
        ("E › F", "f"),
    ]


def test_a_heading_with_no_body_keeps_its_name_in_its_children():
    assert split_sections("# Guide\n## Install\npip install ctxret\n") == [("Guide › Install", "pip install ctxret")]


def test_atx_heading_details():
    text = (
        "## Part ##\np\n   # Indented three\ni\n    # four spaces is code\n#hashtag is not a heading\n## Using C#\nc\n"
    )
    assert split_sections(text) == [
        ("Part", "p"),
        ("Indented three", "i\n    # four spaces is code\n#hashtag is not a heading"),
        ("Indented three › Using C#", "c"),
    ]


def test_no_headings_sections_packed_by_size_from_paragraphs():
    paras = [f"Paragraph {i}: " + "word " * 18 + "end." for i in range(10)]
    assert all(100 <= nbytes(p) <= 110 for p in paras)
    text = "\n\n".join(paras)
    sections = split_sections(text, max_section_bytes=350)
    assert all(h is None for h, _ in sections)
    assert all(nbytes(body) <= 350 for _, body in sections)
    assert len(sections) == 4  # three ~105-byte paragraphs (+2 separators) per section
    # every paragraph, in order, each in exactly one section
    assert [p for _, body in sections for p in body.split("\n\n")] == paras


def test_no_headings_short_text_is_one_section():
    assert split_sections("Just a note.\nSecond line.") == [(None, "Just a note.\nSecond line.")]
    assert SECTION_MAX_BYTES == 4000


def test_no_headings_a_long_paragraph_is_a_section_of_its_own():
    big = "x" * 500
    sections = split_sections(f"small one\n\n{big}\n\nsmall two", max_section_bytes=100)
    assert sections == [(None, "small one"), (None, big), (None, "small two")]


@pytest.mark.parametrize("text", ["", "   \n\n\t", "\n"])
def test_empty_documents_have_no_sections(text):
    assert split_sections(text) == []


def test_crlf_and_control_characters():
    sections = split_sections("# Title\r\nline one\x00 here\r\nline two\r\n")
    assert sections == [("Title", "line one  here\nline two")]


# --------------------------------------------------------------------------- document_turns


def test_document_turns_and_piece_labels():
    turns = document_turns(RUNBOOK, title="Runbook", doc_id="Runbook", metadata={"source": "wiki"})
    assert [t.index for t in turns] == [1, 2, 3, 4, 5]
    assert all(t.kind == "section" and t.label == "Runbook" for t in turns)
    assert all(t.doc_id == "Runbook" and t.thread_id == "Runbook" for t in turns)
    assert [t.turn_id for t in turns][:2] == ["Runbook#1", "Runbook#2"]
    headers = [label_pieces(t)[0].header for t in turns]
    assert headers == [
        "[Runbook]",
        "[Runbook · Deploys]",
        "[Runbook · Deploys › Rollback]",
        "[Runbook · Deploys › Canary]",
        "[Runbook · Monitoring]",
    ]
    piece = label_pieces(turns[2])[0]
    assert piece.kind == "section"
    assert piece.doc_id == "Runbook"
    assert piece.metadata == {"source": "wiki"}
    assert piece.text.startswith("[Runbook · Deploys › Rollback]\nRoll back with the previous tag.")
    assert "git checkout v1.2.2" in piece.text


def test_document_ids_and_thread_scope():
    titled = document_turns("text", title="T")[0]
    assert titled.doc_id == document_id("text", "T") and titled.label == "T"
    # same title, other text: two documents, not one replacing the other (e.g. pages of one PDF)
    assert document_turns("page two", title="T")[0].doc_id != titled.doc_id
    anon = document_turns("some text")[0]
    assert anon.doc_id == document_id("some text") and anon.doc_id.startswith("doc-")
    assert anon.label == anon.doc_id
    assert document_turns("some text")[0].doc_id == anon.doc_id  # deterministic
    assert document_turns("other text")[0].doc_id != anon.doc_id
    scoped = document_turns("text", title="T", doc_id="d1", thread_id="kb")[0]
    assert (scoped.doc_id, scoped.thread_id, scoped.label, scoped.turn_id) == ("d1", "kb", "T", "d1#1")


def test_same_text_in_two_documents_gets_different_piece_ids():
    a = label_pieces(document_turns("Same body.", doc_id="a", title="T")[0])
    b = label_pieces(document_turns("Same body.", doc_id="b", title="T")[0])
    assert a[0].text == b[0].text
    assert a[0].id != b[0].id


def test_document_pieces_within_budget_and_nothing_dropped():
    body = " ".join(f"Step {i}: restart the worker on host {i} and check the queue depth." for i in range(300))
    text = f"# Operations\n## Restarts\n{body}\n"
    (turn,) = document_turns(text, title="Ops manual")
    pieces = label_pieces(turn, max_bytes=400)
    assert len(pieces) > 10
    assert all(nbytes(p.text) <= 400 for p in pieces)
    assert all(p.header == "[Ops manual · Operations › Restarts]" for p in pieces)
    assert "".join(p.body for p in pieces).replace(" ", "") == body.replace(" ", "")


def test_document_turns_refuses_non_text():
    with pytest.raises(InputError, match="string"):
        document_turns(b"bytes")  # type: ignore[arg-type]


def test_empty_document_has_no_turns():
    assert document_turns("", title="Empty") == []
