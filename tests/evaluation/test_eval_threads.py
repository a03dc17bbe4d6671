"""The thread protocol (ctxret.evaluation.threads): loaders, metrics, synthetic JSONL threads, a LoCoMo smoke run."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from ctxret.errors import InputError
from ctxret.evaluation.calibrate import fusion_grid, run_calibrate
from ctxret.evaluation.datasets import (
    composite_queries,
    load_jsonl,
    load_locomo,
    load_threads,
    parse_evidence,
    parse_locomo_time,
)
from ctxret.evaluation.index import Ranked
from ctxret.evaluation.metrics import covered, evidence_recall, first_appearance, mean, reciprocal_rank
from ctxret.evaluation.representations import DEFAULT_REPRESENTATIONS
from ctxret.evaluation.scoring import best_group
from ctxret.evaluation.threads import run_threads
from ctxret.ingest.messages import turns_from_messages

LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo-dev"
THREAD_KEYS = {
    "representation",
    "query_set",
    "top1_section",
    "top1_section_floor",
    "mrr",
    "recall_at_5",
    "recall_1000b",
    "recall_4000b",
    "coverage",
    "n",
}


# -- metric functions, by hand ----------------------------------------------------------------
def test_reciprocal_rank_over_sections_by_first_appearance():
    assert first_appearance([3, 3, 1, 3, 2]) == [3, 1, 2]
    assert reciprocal_rank([3, 3, 1, 2], {2}) == pytest.approx(1 / 3)
    assert reciprocal_rank([3, 3, 1, 2], {1, 2}) == 0.5
    assert reciprocal_rank([5], {5}) == 1.0
    assert reciprocal_rank([3, 1], {7}) == 0.0
    assert reciprocal_rank([], {1}) == 0.0


def test_evidence_recall_and_coverage():
    assert evidence_recall([{"D1:1"}, {"D1:2"}, {"D2:1"}], {"D1:2", "D4:7"}) == 0.5
    assert evidence_recall([{"D1:1", "D1:2"}], {"D1:2", "D1:1"}) == 1.0
    assert evidence_recall([], {"D1:1"}) == 0.0
    assert math.isnan(evidence_recall([{"D1:1"}], set()))
    assert covered([4, 2, 9], {9}) == 1.0
    assert covered([4, 2], {9}) == 0.0
    assert mean([1.0, math.nan, 0.0]) == 0.5


def test_best_group_is_the_group_with_the_highest_top_score():
    a = Ranked("a", np.array([0, 1]), np.array([0.5, 0.4]), None)
    b = Ranked("b", np.array([2]), np.array([0.7]), None)
    empty = Ranked("c", np.array([], dtype=np.int64), np.array([]), None)
    assert best_group([a, b, empty]) is b
    assert best_group([empty]) is None


def test_parse_evidence_is_defensive():
    assert parse_evidence("D8:6; D9:17") == ["D8:6", "D9:17"]
    assert parse_evidence("D30:05") == ["D30:5"]
    assert parse_evidence("D:11:26") == ["D11:26"]
    assert parse_evidence("D") == []
    assert parse_evidence(["D1:3", ["D2:4"]]) == ["D1:3", "D2:4"]
    assert parse_evidence(None) == []


def test_parse_locomo_time():
    assert parse_locomo_time("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56)
    assert parse_locomo_time("12:09 am on 13 September, 2023") == datetime(2023, 9, 13, 0, 9)
    assert parse_locomo_time("sometime") is None


# -- synthetic JSONL threads -------------------------------------------------------------------
def _turn(user: str, assistant: str, ts: str) -> list[dict]:
    return [
        {"role": "user", "content": user, "timestamp": ts},
        {"role": "assistant", "content": assistant, "timestamp": ts},
    ]


HOME = {
    "thread_id": "home",
    "messages": [
        *_turn(
            "We're redoing the kitchen. Hollis & Sons quoted 18,400 pounds and can start on 2 November.",
            "Hollis & Sons is the only quote that finishes the kitchen before Christmas.",
            "2026-10-03T09:14:00",
        ),
        *_turn(
            "For the record, my dogs are called Biscuit and Pepper. Biscuit is the beagle.",
            "Noted: Biscuit the beagle and Pepper.",
            "2026-10-03T09:31:00",
        ),
        {
            "role": "user",
            "content": "Book a table at Luigi's for four people on Friday at eight.",
            "timestamp": "2026-10-04T18:00:00",
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "book_table",
                        "arguments": '{"restaurant": "Luigi\'s", "guests": 4, "time": "Friday 20:00"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Booked: Luigi's, Friday 20:00, 4 guests, reference LX42."},
        {"role": "assistant", "content": "Your table at Luigi's is booked, reference LX42."},
        *_turn(
            "I'm flying to Lisbon on 14 October with TAP, seat 12A by the window.",
            "Your Lisbon flight on 14 October is saved.",
            "2026-10-05T08:00:00",
        ),
        *_turn(
            "Remind me to renew the car insurance with Admiral before 30 November.",
            "Reminder set for the Admiral car insurance renewal.",
            "2026-10-06T07:45:00",
        ),
    ],
    "facts": [
        {"text": "Hollis & Sons can start the kitchen renovation on 2 November.", "turn": 1},
        {"text": "The user's dogs are Biscuit, a beagle, and Pepper.", "turn": 2},
        {"text": "A table for four is booked at Luigi's on Friday at 20:00.", "turn": 3},
        {"text": "The user flies to Lisbon with TAP on 14 October.", "turn": 4},
        {"text": "The car insurance with Admiral must be renewed before 30 November.", "turns": [5]},
    ],
    "questions": [
        {"question": "What are my dogs called?", "turns": [2]},
        {"question": "Which airline am I flying to Lisbon with?", "turns": [4]},
        {"question": "What is the booking reference for Luigi's?", "turn": 3},
    ],
}
OPS = {
    "thread_id": "ops",
    "messages": [
        *_turn(
            "The payments API returned 502 errors for twenty minutes after the load balancer change.",
            "Rolling back the load balancer config fixed the 502 errors.",
            "2026-10-07T10:00:00",
        ),
        *_turn(
            "Plan the Postgres 16 migration of the orders database for the weekend maintenance window.",
            "The orders database migration is planned for Saturday night with a logical replica.",
            "2026-10-07T11:00:00",
        ),
        *_turn(
            "Who is on call next week? Put Ravi on the rota from Monday.",
            "Ravi is on call from Monday to Sunday next week.",
            "2026-10-08T09:00:00",
        ),
        *_turn(
            "The TLS certificate for shop.example.com expires in nine days.",
            "I scheduled the certificate renewal for Thursday.",
            "2026-10-08T09:30:00",
        ),
    ],
    "facts": [
        {"text": "The load balancer change caused 502 errors on the payments API.", "turn": 1},
        {"text": "The orders database moves to Postgres 16 on Saturday night.", "turn": 2},
        {"text": "Ravi is on call next week.", "turn": 3},
        {"text": "The TLS certificate for shop.example.com is renewed on Thursday.", "turn": 4},
    ],
    "questions": [{"question": "When does the shop certificate expire?", "turns": [4]}],
}


def write_synthetic(folder: Path) -> Path:
    """Two JSONL threads (home, ops) with facts and questions; returns the file."""
    path = folder / "threads.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in (HOME, OPS)) + "\n", encoding="utf-8")
    return path


def test_load_jsonl_maps_turns_facts_and_questions(tmp_path):
    convs = load_jsonl(write_synthetic(tmp_path))
    assert [c.id for c in convs] == ["home", "ops"]
    home = convs[0]
    assert [t.index for t in home.turns] == [1, 2, 3, 4, 5]
    assert [sorted(f.gold) for f in home.facts] == [[1], [2], [3], [4], [5]]
    assert home.questions[2].gold == frozenset({3}) and home.questions[2].evidence == frozenset({"T3"})
    assert home.unit_of(3, 1) == "T3"
    assert load_threads(tmp_path)[1].id == "ops"


def test_jsonl_errors_name_the_line(tmp_path):
    bad = dict(OPS, facts=[{"text": "x", "turn": 9}])
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl:1: fact 0 points at turn\(s\) \[9\]"):
        load_jsonl(path)
    path.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(InputError, match="not valid JSON"):
        load_jsonl(path)
    with pytest.raises(InputError, match="does not exist"):
        load_threads(tmp_path / "missing")


def test_composite_messages_join_facts_from_different_sections(tmp_path):
    conv = load_jsonl(write_synthetic(tmp_path))[0]
    comp = composite_queries(conv, seed=0)
    assert len(comp) == 1
    facts = comp[0].facts
    assert len(facts) == 3
    golds = [f.gold for f in facts]
    assert all(not (a & b) for i, a in enumerate(golds) for b in golds[i + 1 :])
    assert all(f.text.rstrip(".") in comp[0].text for f in facts)
    assert composite_queries(conv, seed=0) == comp


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory, local_embedder):
    path = write_synthetic(tmp_path_factory.mktemp("threads"))
    return path, run_threads(load_threads(path), local_embedder, seed=0)


def test_synthetic_rows_schema_and_sanity(synthetic):
    _, res = synthetic
    rows = res.rows
    assert {r["representation"] for r in rows} == set(DEFAULT_REPRESENTATIONS)
    for r in rows:
        assert set(r) <= THREAD_KEYS
        for key in THREAD_KEYS - {"representation", "query_set", "n"}:
            if key in r:
                assert 0.0 <= r[key] <= 1.0
        if r["query_set"] == "composite":
            assert set(r) == {"representation", "query_set", "coverage", "n"}
        else:
            assert "coverage" not in r
            # no floor
            no_cosine = r["representation"] in ("bm25", "peer_bm25s", "peer_ensemble_rrf", "peer_query_fusion")
            assert ("top1_section_floor" in r) == (not no_cosine)
    by = {(r["representation"], r["query_set"]): r for r in rows}
    assert by[("pieces_blend", "facts")]["n"] == 9
    assert by[("pieces_blend", "qa")]["n"] == 4
    assert by[("pieces_blend", "composite")]["n"] == 6  # one 3-fact message per thread
    assert ("whole_turn", "composite") not in by
    # distinct topics per turn: dense pieces and BM25 find the right turn for nearly every fact
    assert by[("pieces_blend", "facts")]["top1_section"] >= 0.75
    assert by[("bm25", "facts")]["top1_section"] >= 0.75
    assert by[("pieces_blend_split", "composite")]["coverage"] >= 0.8
    assert res.config["counts"]["conversations"] == 2


def test_synthetic_runs_are_deterministic(synthetic, local_embedder):
    path, res = synthetic
    again = run_threads(load_threads(path), local_embedder, seed=0)
    assert again.rows == res.rows


def test_k_changes_the_recall_key(synthetic, local_embedder):
    path, _ = synthetic
    res = run_threads(load_threads(path), local_embedder, representations=["pieces"], query_sets=["facts"], k=3)
    assert "recall_at_3" in res.rows[0] and "recall_at_5" not in res.rows[0]


def test_calibrate_on_synthetic_threads(synthetic, local_embedder):
    path, _ = synthetic
    res = run_calibrate(
        load_threads(path),
        local_embedder,
        weights=(0.8, 1.0),
        piece_bytes_grid=[300, 600],
        fusion_configs=fusion_grid((0.5, 0.8), (60.0,)),
    )
    assert set(res.recommended) == {"weight", "piece_bytes", "threshold", "fusion", "relevance"}
    assert set(res.recommended["relevance"]["hybrid"]) == {
        "intercept",
        "cosine_weight",
        "coverage_weight",
        "coverage_sq_weight",
        "top_weight",
        "margin_weight",
        "first_weight",
    }
    held = [r for r in res.curves["relevance_separation"] if r["relevance"] == "held out by fold"]
    assert held and all(0.0 <= r["auc"] <= 1.0 for r in held)
    assert res.recommended["weight"] in (0.8, 1.0)
    assert res.recommended["piece_bytes"] in (300, 600)
    assert 0.0 <= res.recommended["threshold"] <= 0.8
    assert res.recommended["fusion"]["method"] in ("rrf", "weighted_rrf", "convex")
    assert [r["weight"] for r in res.curves["weight"]] == [0.8, 1.0]
    kept = [r["correct_kept"] for r in res.curves["threshold"]]
    assert kept == sorted(kept, reverse=True)  # a higher floor never keeps more
    assert "fusion_leave_one_out" in res.curves  # two threads → a held-out estimate


# -- LoCoMo smoke ------------------------------------------------------------------------------
needs_locomo = pytest.mark.skipif(not (LOCOMO / "30.json").exists(), reason=f"LoCoMo dev split not at {LOCOMO}")


@needs_locomo
def test_locomo_loader_maps_sessions_utterances_and_evidence():
    conv = load_locomo(LOCOMO / "30.json")
    assert conv.id == "30"
    assert len(conv.turns) == 19
    assert sum(len(t.sources) for t in conv.turns) == 369
    t1 = conv.turns[0]
    assert t1.label == "Session 1" and t1.timestamp == datetime(2023, 1, 20, 16, 4)
    assert {s.label for s in t1.sources} == {"Jon", "Gina"}
    assert any("[shares a photo: " in s.text for t in conv.turns for s in t.sources)
    assert conv.unit_of(1, 0) == "D1:1"
    assert len(conv.facts) == 169 and len(conv.questions) == 81
    for q in conv.facts + conv.questions:
        assert q.gold and all(int(e[1:].split(":")[0]) in q.gold for e in q.evidence)


@pytest.mark.slow  # a whole LoCoMo conversation through the harness
@needs_locomo
def test_locomo_smoke_one_conversation(local_embedder):
    res = run_threads(load_threads(LOCOMO / "30.json"), local_embedder, limit_queries=60, seed=0)
    by = {(r["representation"], r["query_set"]): r for r in res.rows}
    assert by[("pieces_blend", "facts")]["n"] == 60
    assert by[("pieces_blend", "qa")]["n"] == 60
    assert by[("pieces_blend", "composite")]["n"] == 60
    assert "top1_section_floor" not in by[("bm25", "facts")]
    for r in res.rows:
        assert set(r) <= THREAD_KEYS
    c = res.config["counts"]
    assert c["sections"] == 19 and c["pieces"] >= 369
    # the done-criterion, on this smoke subset: labelled pieces beat one vector per session
    assert by[("pieces_blend", "facts")]["top1_section"] > by[("whole_turn", "facts")]["top1_section"]
    assert by[("pieces_blend", "facts")]["mrr"] > by[("whole_turn", "facts")]["mrr"]
    # splitting is what composite messages need
    assert by[("pieces_blend_split", "composite")]["coverage"] >= by[("pieces_blend", "composite")]["coverage"]


# -- context strategies and the runtime's hybrid default ----------------------------------------
NEW_REPRESENTATIONS = ("pieces_turnctx", "pieces_late", "late_only", "hybrid_default")


def test_new_representations_have_rows_and_late_only_is_not_pieces(synthetic):
    _, res = synthetic
    by = {(r["representation"], r["query_set"]): r for r in res.rows}
    for rep in NEW_REPRESENTATIONS:
        for qs in ("facts", "qa", "composite"):
            assert (rep, qs) in by
        assert set(by[(rep, "facts")]) == {
            "representation",
            "query_set",
            "top1_section",
            "top1_section_floor",
            "mrr",
            "recall_at_5",
            "recall_1000b",
            "recall_4000b",
            "n",
        }
    assert res.config["skipped_representations"] == []

    def cosines(rep: str) -> list[float]:
        return [q["top_cosine"] for q in res.per_query if q["representation"] == rep and q["query_set"] == "facts"]

    # pure late chunking stores other vectors than the pieces alone, and than the mean-context blend
    assert not np.allclose(cosines("late_only"), cosines("pieces"), atol=1e-3)
    assert not np.allclose(cosines("pieces_late"), cosines("pieces_blend_split"), atol=1e-3)
    assert not np.allclose(cosines("pieces_turnctx"), cosines("pieces_blend_split"), atol=1e-3)


@pytest.fixture(scope="module")
def home_index(tmp_path_factory, local_embedder):
    """The harness's index of the synthetic "home" thread."""
    from ctxret.evaluation.index import ConversationIndex

    conv = load_threads(write_synthetic(tmp_path_factory.mktemp("home")))[0]
    ix = ConversationIndex(conv, local_embedder)
    yield ix
    ix.close()


@pytest.mark.parametrize("context, weight", [("mean", 0.8), ("turn", 0.8), ("late", 0.8), ("late", 0.0)])
def test_context_representations_store_what_the_runtime_stores(home_index, local_embedder, context, weight):
    from ctxret import ContextualIndex

    index = ContextualIndex(
        in_memory=True,
        embedder=local_embedder,
        collection=f"eval-{context}-{int(weight * 10)}",
        context=context,
        weight=weight,
        lexical=False,
    )
    index.add_turns(turns_from_messages(HOME["messages"], "home"))  # as given, like the harness
    got = index.store.chroma.get(home_index.piece_ids, include=("embeddings",))
    runtime = {r["id"]: np.asarray(r["embedding"], dtype=np.float32) for r in got}
    assert set(runtime) == set(home_index.piece_ids)
    harness = home_index.stored(context, weight)
    for i, pid in enumerate(home_index.piece_ids):
        assert np.allclose(harness[i], runtime[pid], atol=1e-5), (context, weight, pid)


RUNTIME_QUERIES = (
    "What is the booking reference LX42?",
    "LX42",  # the piece holding it is under the cosine floor: kept on lexical coverage
    "seat 12A",
    "When does the Lisbon flight leave?",
    "What are my dogs called?",
    "Hollis quote kitchen",
    "What is the boiling point of tungsten?",  # off-topic: nothing passes the floor
    "Tell me about the weather on Mars. Also, who quoted for the kitchen?",  # two parts
)


def test_hybrid_default_is_the_runtime_search(home_index, local_embedder):
    """The harness's hybrid_default top-k after the floor equals ContextualIndex.search, floors included."""
    from ctxret import ContextualIndex
    from ctxret.evaluation.representations import THREAD_REPRESENTATIONS

    index = ContextualIndex(in_memory=True, embedder=local_embedder, collection="eval-hybrid-pin")
    index.add_turns(turns_from_messages(HOME["messages"], "home"))  # as given, like the harness
    rescued = dropped = 0
    for floor in (None, 0.3, 0.5):
        for lexical_floor in ("default", None):
            for q in RUNTIME_QUERIES:
                kw = {} if lexical_floor == "default" else {"lexical_floor": None}
                groups = index.search(q, k=5, cosine_floor=floor, thread_id="home", **kw)
                runtime = [[h.id for h in g.hits] for g in groups]
                ret = THREAD_REPRESENTATIONS["hybrid_default"](home_index, q)
                harness = []
                for g in ret.groups:
                    if lexical_floor is None:
                        g.lexical_floor = None
                    kept = g.kept(floor)[:5]
                    harness.append([home_index.piece_ids[i] for i in g.items[kept]])
                    if floor is not None:
                        rescued += int(np.sum(g.cosines[kept] < floor))
                        dropped += len(g.items[:5]) - len(kept)
                assert harness == runtime, (floor, lexical_floor, q)
    assert rescued > 0 and dropped > 0  # both sides of the rule were exercised
    # an off-topic question: its words are question scaffolding (dropped from a question's terms) or
    # absent, so BM25 finds nothing, and the floor keeps nothing the dense side found
    assert not home_index.bm25("What is the boiling point of tungsten?", 50)
    assert not index.search("What is the boiling point of tungsten?", thread_id="home")[0].hits


def test_floor_mask_is_the_runtime_rule():
    from ctxret.evaluation.hybrid import RUNTIME_DEFAULT, floor_mask
    from ctxret.query.fusion import DEFAULT_LEXICAL_FLOOR, FusionSettings

    cos = np.array([0.6, 0.2, 0.2, 0.1])
    cov = np.array([0.0, 0.3, 0.29, 1.0])
    assert floor_mask(cos, cov, None).tolist() == [True] * 4
    # default lexical floor 0.3; a rescue also needs half the floor (0.15) of cosine: 0.1 is not rescued
    assert floor_mask(cos, cov, 0.3).tolist() == [True, True, False, False]
    assert floor_mask(cos, cov, 0.2).tolist() == [True, True, True, True]
    assert floor_mask(cos, cov, 0.3, lexical_floor=None).tolist() == [True, False, False, False]
    assert floor_mask(cos, None, 0.3).tolist() == [True, False, False, False]  # dense: cosine only
    assert floor_mask(cos, cov, 0.05, lexical_floor=1.0).tolist() == [True] * 4
    assert RUNTIME_DEFAULT == FusionSettings() and RUNTIME_DEFAULT.lexical_floor == DEFAULT_LEXICAL_FLOOR


class _NoTokens:
    """The local model without token output (like a hosted API)."""

    def __init__(self, inner):
        self.inner = inner
        self.model_id, self.dims, self.max_tokens = inner.model_id, inner.dims, inner.max_tokens
        self.default_piece_bytes = inner.default_piece_bytes
        self.default_score_threshold = inner.default_score_threshold

    def embed(self, texts):
        return self.inner.embed(texts)

    async def aembed(self, texts):
        return self.inner.embed(texts)

    def count_tokens(self, texts):
        return self.inner.count_tokens(texts)


def test_late_representations_need_token_output(tmp_path, local_embedder):
    convs = load_threads(write_synthetic(tmp_path))[:1]
    emb = _NoTokens(local_embedder)
    res = run_threads(convs, emb, query_sets=["facts"], limit_queries=2)
    assert res.config["skipped_representations"] == ["pieces_late", "late_only"]
    assert "pieces_late" not in {r["representation"] for r in res.rows}
    with pytest.raises(InputError, match="token-level output"):
        run_threads(convs, emb, representations=["late_only"], query_sets=["facts"], limit_queries=2)


def test_floor_sweep_reports_off_topic_questions(synthetic, local_embedder):
    from ctxret.evaluation.calibrate import OFF_TOPIC_QUESTIONS

    assert len(OFF_TOPIC_QUESTIONS) == len(set(OFF_TOPIC_QUESTIONS)) == 40
    path, _ = synthetic
    res = run_calibrate(
        load_threads(path),
        local_embedder,
        sweeps=("threshold",),
        off_topic=OFF_TOPIC_QUESTIONS[:8],
        thresholds=(0.0, 0.3, 0.6),
    )
    curve = res.curves["threshold"]
    assert [r["threshold"] for r in curve] == [0.0, 0.3, 0.6]
    dense = [r["offtopic_any_pieces_blend"] for r in curve]
    hybrid = [r["offtopic_any_hybrid_default"] for r in curve]
    assert dense[0] == 1.0  # no floor to speak of: every question gets a dense answer
    assert hybrid[0] > hybrid[2]  # (late-chunked vectors can have negative cosines: not every one at 0)
    assert dense == sorted(dense, reverse=True) and hybrid == sorted(hybrid, reverse=True)
    assert dense[2] == 0.0  # nothing off-topic clears a 0.6 cosine here
    assert {"correct_kept", "wrong_rejected", "qa_correct_kept", "qa_wrong_rejected"} <= set(curve[0])
    for rep in ("pieces_blend", "hybrid_default"):
        recall = [r[f"qa_recall_at_5_floor_{rep}"] for r in curve]
        assert recall == sorted(recall, reverse=True) and recall[0] > 0.5  # a floor only ever drops hits
    assert res.config["floor_representation"] == "pieces_blend" and res.config["off_topic_questions"] == 8
    assert any(n.startswith("threshold:") and "off-topic" in n for n in res.notes)
