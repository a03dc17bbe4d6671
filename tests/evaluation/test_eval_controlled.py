"""The controlled test harness (ctxret.evaluation.controlled) on the small fixture in tests/data."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import numpy as np
import pytest
from ctxret.evaluation.controlled import (
    CONDITIONS,
    NOISE_SENTENCES,
    REPRESENTATIONS,
    FixtureError,
    load_fixture,
    noisy_passage,
    noisy_query,
    run_controlled,
)
from ctxret.evaluation.metrics import TIE_TOLERANCE, best_part, top1_credit, top_block

SMALL = Path(__file__).resolve().parents[1] / "data" / "controlled_small.json"
SHIPPED = Path(__file__).resolve().parents[2] / "shared" / "ctxret" / "data" / "controlled_fixture.json"
ROW_KEYS = {"representation", "condition", "block", "top1", "n"}


# -- metric functions, by hand ----------------------------------------------------------------
def test_top1_credit_counts_ties_fractionally():
    assert top1_credit([0.9, 0.9, 0.9, 0.9, 0.1], 0) == 0.25
    assert top1_credit([0.9, 0.9, 0.5], 1) == 0.5
    assert top1_credit([0.2, 0.9, 0.5], 1) == 1.0
    assert top1_credit([0.2, 0.9, 0.5], 2) == 0.0
    # within the tolerance is a tie, beyond it is not
    assert top1_credit([0.9, 0.9 - TIE_TOLERANCE / 2], 1) == 0.5
    assert top1_credit([0.9, 0.9 - 10 * TIE_TOLERANCE], 1) == 0.0
    # nothing returned
    assert top1_credit([-np.inf, -np.inf], 0) == 0.0
    assert top1_credit([0.3, -np.inf], 1) == 0.0


def test_top_block_needs_all_members_strictly_above_the_rest():
    assert top_block([0.8, 0.8, 0.8, 0.8, 0.5, 0.1], [0, 1, 2, 3])
    assert not top_block([0.8, 0.8, 0.8, 0.6, 0.7], [0, 1, 2, 3])
    assert not top_block([0.8, 0.8, 0.8, 0.7, 0.7], [0, 1, 2, 3])  # tie with an outsider fails
    assert top_block([0.1, 0.2], [0, 1])  # nothing else in the block


def test_best_part_prefers_containment_then_word_overlap():
    parts = ["The train was cancelled again today.", "When is the locksmith swapping the lock cylinder?", "Buy a card."]
    assert best_part(parts, "When is the locksmith swapping the lock cylinder on the door?") == 1
    assert best_part(parts, "lock cylinder swap by the locksmith") == 1


# -- fixture -----------------------------------------------------------------------------------
def test_small_fixture_is_valid_and_has_twelve_families():
    fx = load_fixture(SMALL)
    assert len(fx.families) == 12
    assert all(len(f.contexts) == 4 for f in fx.families)
    assert set(fx.blocks) == {"sense", "purpose"}
    assert len(fx.distractors) >= NOISE_SENTENCES
    for f in fx.families:
        for c in f.contexts:
            assert c.passage.count(f.sentence) == 1


@pytest.mark.skipif(not SHIPPED.exists(), reason="shipped 24-family fixture not present")
def test_shipped_fixture_is_valid():
    fx = load_fixture(SHIPPED)
    assert len(fx.families) == 24


def _data():
    return json.loads(SMALL.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["families"][0]["contexts"].pop(), "exactly 4 contexts"),
        (lambda d: d["families"][0]["contexts"][1].update(passage="No shared sentence here."), "verbatim exactly once"),
        (lambda d: d.update(version=2), "version"),
        (lambda d: d.update(distractors=["one", "two"]), "at least 5 distractors"),
        (lambda d: d["families"][1].update(id=d["families"][0]["id"]), "duplicate family id"),
        (lambda d: d["families"][0]["contexts"][0].pop("query"), "needs id, passage, query"),
    ],
)
def test_bad_fixtures_are_refused_with_a_clear_error(mutate, message):
    data = copy.deepcopy(_data())
    mutate(data)
    with pytest.raises(FixtureError, match=message):
        load_fixture(data)


def test_missing_fixture_file(tmp_path):
    with pytest.raises(FixtureError, match="does not exist"):
        load_fixture(tmp_path / "nope.json")


def test_noise_keeps_the_sentence_and_adds_five_distractors():
    fx = load_fixture(SMALL)
    fam = fx.families[0]
    ctx = fam.contexts[0]
    noisy = noisy_passage(ctx.passage, fam.sentence, fx.distractors, random.Random("0/stored/x"))
    assert noisy.count(fam.sentence) == 1
    assert sum(noisy.count(d) for d in fx.distractors) == NOISE_SENTENCES
    assert noisy == noisy_passage(ctx.passage, fam.sentence, fx.distractors, random.Random("0/stored/x"))
    q = noisy_query(ctx.query, fx.distractors, random.Random("0/query/x"))
    assert ctx.query in q and sum(q.count(d) for d in fx.distractors) == NOISE_SENTENCES


# -- the run -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def result(local_embedder):
    return run_controlled(SMALL, local_embedder, seed=0)


def test_rows_follow_the_schema(result):
    rows = result.rows
    assert rows and all(set(r) == ROW_KEYS for r in rows)
    assert all(0.0 <= r["top1"] <= 1.0 for r in rows)
    assert {r["representation"] for r in rows} == set(REPRESENTATIONS)
    assert {r["condition"] for r in rows} == set(CONDITIONS) | {"message_any", "generic"}
    assert {r["block"] for r in rows} == {"sense", "purpose", "all"}
    by = {(r["representation"], r["condition"], r["block"]): r for r in rows}
    # 8 sense + 4 purpose families, 4 contexts each
    assert by[("blend", "clean", "sense")]["n"] == 32
    assert by[("blend", "clean", "purpose")]["n"] == 16
    assert by[("blend", "clean", "all")]["n"] == 48
    assert by[("blend", "generic", "all")]["n"] == 12
    # the "all" row is the pooled mean of the blocks
    for rep in REPRESENTATIONS:
        for cond in ("clean", "both_noise", "generic"):
            s, p, a = (by[(rep, cond, b)] for b in ("sense", "purpose", "all"))
            assert a["top1"] == pytest.approx((s["top1"] * s["n"] + p["top1"] * p["n"]) / a["n"])


def test_isolated_ties_four_ways(result):
    by = {(r["representation"], r["condition"], r["block"]): r["top1"] for r in result.rows}
    # the same sentence on every record: the four contexts tie, each gets a quarter of a hit
    assert by[("isolated", "clean", "all")] == 0.25
    iso = [q["top1"] for q in result.per_query if q["representation"] == "isolated" and q["condition"] == "clean"]
    assert set(iso) == {0.25}
    # noise around the stored passage cannot change an isolated sentence vector
    assert by[("isolated", "stored_noise", "all")] == 0.25
    # a generic query finds the four identical vectors at the top of every family
    assert by[("isolated", "generic", "all")] == 1.0


def test_context_separates_the_contexts(result):
    by = {(r["representation"], r["condition"], r["block"]): r["top1"] for r in result.rows}
    assert by[("whole", "clean", "all")] > 0.9
    assert by[("blend", "clean", "all")] > 0.9
    # blended stored vectors keep every family's four records on top for the generic query
    assert by[("blend", "generic", "all")] >= 0.9
    # "any group" can only be as good or better than the intent part's group
    for rep in REPRESENTATIONS:
        assert by[(rep, "message_any", "all")] >= by[(rep, "message", "all")] - 1e-12


@pytest.mark.slow  # the controlled test run a second time
def test_same_seed_same_rows(result, local_embedder):
    again = run_controlled(SMALL, local_embedder, seed=0)
    assert again.rows == result.rows


def test_weight_one_blend_equals_isolated(local_embedder):
    res = run_controlled(
        SMALL,
        local_embedder,
        representations=["isolated", "blend", "late"],
        conditions=["clean"],
        weight=1.0,
        generic=False,
    )
    by = {(r["representation"], r["block"]): r["top1"] for r in res.rows}
    assert by[("blend", "all")] == by[("isolated", "all")] == by[("late", "all")] == 0.25


def test_late_chunking_tells_the_contexts_apart(result, local_embedder):
    from ctxret.evaluation.controlled import late_sentence_vector

    fx = load_fixture(SMALL)
    fam = fx.families[0]
    own = local_embedder.embed([fam.sentence])[0]
    late = np.vstack([late_sentence_vector(local_embedder, c.passage, fam.sentence) for c in fam.contexts])
    assert np.allclose(np.linalg.norm(late, axis=1), 1.0, atol=1e-5)
    # the pooled span is about the sentence, but each context's passage moved it somewhere else
    assert np.all(late @ own > 0.5)
    assert np.all(late @ own < 0.999)
    assert np.linalg.matrix_rank(late, tol=1e-3) == 4
    # unlike the isolated sentence (a four-way tie for every query), late_only does not tie
    credits = [q["top1"] for q in result.per_query if q["representation"] == "late_only" and q["condition"] == "clean"]
    assert len(credits) == 48 and 0.25 not in credits


def test_unknown_representation_is_refused(local_embedder):
    with pytest.raises(ValueError, match="unknown controlled representation"):
        run_controlled(SMALL, local_embedder, representations=["nope"])
