"""The lexical index: Unicode tokenizer, BM25 on SQLite FTS5 (checked against bm25s), scoping, persistence."""

from __future__ import annotations

import math
import sqlite3

import pytest
from ctxret.errors import InputError
from ctxret.storage.lexical import LEXICAL_VERSION, LexicalIndex, default_lexical_path, scope_token
from ctxret.storage.tokenize import MAX_QUERY_TOKENS, MAX_TOKEN_CHARS, analysis, query_tokens, tokenize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


# -- tokenizer ------------------------------------------------------------------------------------
def test_accents_case_and_width_fold():
    assert tokenize("Café NAÏVE Ünïcödé") == ["cafe", "naive", "unicode"]
    assert tokenize("Straße") == ["strasse"]
    assert tokenize("ＡＢＣ１２３") == ["abc123"]  # full-width → ASCII (NFKC)
    assert tokenize("ﬁle ①") == ["file", "1"]
    assert tokenize("Ἀθῆναι ΆΘΗΝΑ") == ["αθηναι", "αθηνα"]
    # the same word with and without accents meets in the index
    assert tokenize("résumé") == tokenize("resume") == tokenize("RÉSUMÉ")


def test_other_scripts_keep_their_marks():
    assert tokenize("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # vowel signs stay inside the word
    assert tokenize("Привет, мир") == ["привет", "мир"]
    assert tokenize("مرحبا بالعالم") == ["مرحبا", "بالعالم"]


def test_cjk_unigrams_and_bigrams():
    assert tokenize("東京タワー") == ["東", "京", "タ", "ワ", "ー", "東京", "京タ", "タワ", "ワー"]
    assert tokenize("学校에서") == ["学", "校", "에", "서", "学校", "校에", "에서"]
    assert tokenize("iPhone15を買った") == ["iphone15", "を", "買", "っ", "た", "を買", "買っ", "った"]
    # half-width katakana becomes full-width first, so both spellings meet
    assert tokenize("ﾀﾜｰ") == tokenize("タワー")
    assert tokenize("ภาษาไทย")[:3] == ["ภ", "า", "ษ"]  # Thai has no spaces either


def test_emoji_symbols_and_punctuation():
    assert tokenize("🎉 party! ❤️ 👨‍👩‍👧 ©") == ["🎉", "party", "❤", "👨", "👩", "👧", "©"]
    assert tokenize("x_y--z, 3.14; (a)") == ["x", "y", "z", "3", "14", "a"]
    assert tokenize("") == [] and tokenize("  \n\t ") == [] and tokenize("!!! ???") == []


def test_bad_text_never_breaks_the_tokenizer():
    assert tokenize("\ud800 lone \udfff surrogates") == ["lone", "surrogates"]
    assert tokenize("ctrl\x00\x07chars\x1b") == ["ctrl", "chars"]
    assert tokenize("a" * 500) == ["a" * MAX_TOKEN_CHARS]
    assert tokenize("e" + "\u0301" * 300) == ["e"]
    with pytest.raises(InputError, match="string"):
        tokenize(None)  # type: ignore[arg-type]


def test_query_tokens_are_distinct_and_capped():
    assert query_tokens("the cat and the hat") == ["the", "cat", "and", "hat"]
    many = " ".join(f"w{i}" for i in range(MAX_QUERY_TOKENS + 50))
    assert len(query_tokens(many)) == MAX_QUERY_TOKENS


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=()), max_size=200))
def test_tokenize_property_any_string(text):
    tokens = tokenize(text)
    for tok in tokens:
        assert tok, "empty token"
        assert not any(ch.isspace() for ch in tok), f"whitespace in {tok!r}"
        assert len(tok) <= MAX_TOKEN_CHARS
        assert '"' not in tok


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=80))
def test_any_indexed_text_is_found_by_itself(text):
    with LexicalIndex() as lex:
        lex.upsert(["p"], [text], ["t"], ["t#1"])
        lex.upsert(["other"], ["unrelated filler words"], ["t"], ["t#2"])
        hits = lex.search(text, 5, ["t"])
        if lex.analysis.query_terms(text):
            assert "p" in [i for i, _ in hits]
        else:
            assert hits == []


# -- BM25 against a reference ---------------------------------------------------------------------
CORPUS = {
    "d1": "the quick brown fox jumps over the lazy dog",
    "d2": "a quick brown dog outpaces a quick red fox",
    "d3": "lorem ipsum dolor sit amet consectetur",
    "d4": "the dog sleeps all day in the warm sun",
    "d5": "foxes are wild animals related to dogs",
    "d6": "sun and rain make the garden grow",
    "d7": "tomatoes ripen in the summer sun",
    "d8": "my cat ignores the dog completely",
}


def _reference_bm25(query: str, k1: float = 1.2, b: float = 0.75) -> dict[str, float]:
    """Okapi BM25 as FTS5 computes it, written out by hand (Robertson idf, floored at 1e-6).

    A document's length counts its scope token too (FTS5 sums every column): one more token.
    """
    a = analysis()
    docs = {d: a.index_tokens(t) + ["<scope>"] for d, t in CORPUS.items()}
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n
    out: dict[str, float] = {}
    for d, toks in docs.items():
        score, hit = 0.0, False
        for term in a.query_terms(query):
            df = sum(term in t for t in docs.values())
            tf = toks.count(term)
            if not tf:
                continue
            hit = True
            idf = max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(toks) / avgdl))
        if hit:
            out[d] = score
    return out


@pytest.fixture
def corpus_index():
    lex = LexicalIndex()
    ids = list(CORPUS)
    lex.upsert(ids, [CORPUS[i] for i in ids], ["t"] * len(ids), [f"t#{i}" for i in ids])
    yield lex
    lex.close()


@pytest.mark.parametrize("query", ["quick fox", "sun garden", "lazy dog", "cat", "lorem ipsum tomatoes"])
def test_bm25_matches_the_formula(corpus_index, query):
    ref = _reference_bm25(query)
    got = dict(corpus_index.search(query, 10, ["t"]))
    assert got.keys() == ref.keys()
    for d in ref:
        assert got[d] == pytest.approx(ref[d], rel=1e-9)
    # scores() gives the same number for any piece, 0.0 for one that holds no query token
    exact = corpus_index.scores(query, list(CORPUS), ["t"])
    assert exact == pytest.approx({d: ref.get(d, 0.0) for d in CORPUS})


def test_bm25_agrees_with_bm25s(corpus_index):
    bm25s = pytest.importorskip("bm25s")
    ids = list(CORPUS)
    retriever = bm25s.BM25(method="robertson", k1=1.2, b=0.75)
    a = analysis()
    retriever.index([a.index_tokens(CORPUS[i]) + [scope_token("t")] for i in ids], show_progress=False)
    for query in ["quick fox", "sun garden", "lazy dog"]:
        theirs = retriever.get_scores(a.query_terms(query))
        ours = corpus_index.scores(query, ids, ["t"])
        for i, d in enumerate(ids):
            # bm25s' Robertson variant leaves out the constant (k1 + 1) factor and floors a
            # negative idf at 0 where FTS5 floors it at 1e-6
            assert ours[d] == pytest.approx(theirs[i] * 2.2, rel=1e-5, abs=1e-5)


def test_coverage_weighs_rare_words_and_ignores_common_ones():
    with LexicalIndex() as lex:
        texts = {
            "cake": "how long to bake the chocolate cake",
            "oven": "the cake is in the oven",
            "temp": "bake at 175 c for 35 minutes",
            "dog": "the dog is in the garden",
            "cat": "the cat sleeps in the sun",
            "car": "the car insurance renews in november",
        }
        lex.upsert(list(texts), list(texts.values()), ["t"] * 6, [f"t#{i}" for i in range(6)])
        cov = lex.coverage("How long do I bake the chocolate cake?", list(texts))
        n = 6
        df_of = {"how": 1, "long": 1, "bake": 2, "chocolate": 1, "cake": 2}
        idf = {t: math.log((n - df + 0.5) / (df + 0.5)) for t, df in df_of.items()}
        absent = math.log((n + 0.5) / 0.5)  # "do", "i": no piece holds them
        total = sum(idf.values()) + 2 * absent
        assert cov["cake"] == pytest.approx(sum(idf.values()) / total)
        assert cov["temp"] == pytest.approx(idf["bake"] / total)
        assert cov["dog"] == 0.0  # only common words ("the" is in 5 of 6 pieces: weight 0)
        assert lex.coverage("the in", list(texts)) == dict.fromkeys(texts, 0.0)
        assert lex.coverage("lattice gluon propagators", ["cake"]) == {"cake": 0.0}
        assert lex.coverage("anything", ["unknown-id"]) == {}


# -- the index ------------------------------------------------------------------------------------
def test_upsert_replace_delete_clear():
    with LexicalIndex() as lex:
        lex.upsert(["a", "b"], ["red apples", "green pears"], ["t1", "t1"], ["t1#1", "t1#1"])
        assert lex.ids() == {"a", "b"} and lex.count() == 2
        lex.upsert(["a"], ["yellow bananas"], ["t1"], ["t1#1"])  # replace: old tokens gone
        assert lex.search("apples", 5) == [] and [i for i, _ in lex.search("bananas", 5)] == ["a"]
        lex.write(["c"], ["blue plums"], ["t2"], ["t2#1"], delete=["b"])
        assert lex.ids() == {"a", "c"} and lex.ids("t2") == {"c"}
        lex.delete(["zzz", "a"])  # unknown ids are ignored
        assert lex.ids() == {"c"}
        lex.clear()
        assert lex.count() == 0 and lex.search("plums", 5) == []
        with pytest.raises(InputError, match="same length"):
            lex.upsert(["x"], [], ["t"], ["t#1"])


def test_a_failed_write_leaves_nothing_half_written():
    with LexicalIndex() as lex:
        lex.upsert(["a"], ["alpha"], ["t"], ["t#1"])
        with pytest.raises(InputError, match="expects a string"):
            lex.write(["b", "c"], ["beta", None], ["t", "t"], ["t#2", "t#3"])  # type: ignore[list-item]
        assert lex.ids() == {"a"}


def test_scoping_is_inside_the_query_and_never_leaks():
    with LexicalIndex() as lex:
        threads = [f"user-{n}" for n in range(12)]
        ids, texts, ths, turns = [], [], [], []
        for n, th in enumerate(threads):
            for j in range(5):
                ids.append(f"{th}/{j}")
                texts.append(f"shared words about invoices and shipping number {j} owner{n}")
                ths.append(th)
                turns.append(f"{th}#{j}")
        lex.upsert(ids, texts, ths, turns)
        for th in threads:
            hits = lex.search("invoices shipping owner3 number 2", 100, [th])
            assert hits and all(i.startswith(f"{th}/") for i, _ in hits)
        two = lex.search("invoices", 100, ["user-1", "user-7"])
        assert {i.split("/")[0] for i, _ in two} == {"user-1", "user-7"}
        assert lex.search("invoices", 100, []) == []
        assert lex.search("invoices", 100, ["nobody"]) == []
        assert len(lex.search("invoices", 1000)) == 60  # unscoped: every thread
        # scores() honours the scope too
        assert set(lex.scores("invoices", ["user-1/0", "user-2/0"], ["user-1"])) == {"user-1/0"}


def test_cjk_and_accented_documents_are_found():
    with LexicalIndex() as lex:
        lex.upsert(
            ["ja", "zh", "ko", "fr"],
            ["東京タワーに行きました", "我们明天去北京开会", "학교에서 공부했어요", "Le café de la gare à Noël"],
            ["t"] * 4,
            ["t#1", "t#2", "t#3", "t#4"],
        )
        assert lex.search("東京", 1)[0][0] == "ja"
        assert lex.search("北京开会", 1)[0][0] == "zh"
        assert lex.search("학교", 1)[0][0] == "ko"
        assert lex.search("CAFE noel", 1)[0][0] == "fr"
        assert [i for i, _ in lex.search("タワー", 5)] == ["ja"]
        assert {i for i, _ in lex.search("京都", 5)} == {"ja", "zh"}  # both hold 京, neither 京都


def test_persistence_and_version_reset(tmp_path):
    path = tmp_path / "sub" / "lex.sqlite3"
    with LexicalIndex(path) as lex:
        assert lex.fresh
        lex.upsert(["a", "b"], ["red apples", "東京の夜"], ["t", "t"], ["t#1", "t#2"])
        before = lex.search("apples 東京", 5, ["t"])
    with LexicalIndex(path) as lex:
        assert not lex.fresh and lex.ids() == {"a", "b"}
        assert lex.search("apples 東京", 5, ["t"]) == before
    # a file written by another version is emptied (ctxret refills it from Chroma)
    db = sqlite3.connect(path)
    db.execute("UPDATE ctxret_meta SET value = 'old' WHERE key = 'version'")
    db.commit()
    db.close()
    with LexicalIndex(path) as lex:
        assert lex.fresh and lex.count() == 0
        row = lex._db.execute("SELECT value FROM ctxret_meta WHERE key = 'version'").fetchone()
        assert row[0] == lex.version and lex.version.startswith(LEXICAL_VERSION)


def test_pending_marker():
    with LexicalIndex() as lex:
        assert not lex.journal.pending
        lex.journal.mark_pending()
        assert lex.journal.pending
        lex.upsert(["a"], ["x"], ["t"], ["t#1"])  # a plain write does not settle
        assert lex.journal.pending
        lex.write(delete=["zzz"], settle=True)
        assert not lex.journal.pending
        # a write that never settled (it failed between the stores) keeps the marker set through
        # later writes of this process, until a repair settles everything
        lex.journal.mark_pending()
        lex.journal.mark_pending()
        lex.write(["b"], ["y"], ["t"], ["t#2"], settle=True)
        assert lex.journal.pending
        lex.journal.settle_all()
        assert not lex.journal.pending


def test_two_connections_share_one_file(tmp_path):
    path = tmp_path / "shared.sqlite3"
    with LexicalIndex(path) as one, LexicalIndex(path) as two:
        one.upsert(["a"], ["written by one"], ["t"], ["t#1"])
        assert [i for i, _ in two.search("written", 5)] == ["a"]
        mode = two._db.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode.lower() == "wal"


def test_missing_fts5_is_a_clear_error(monkeypatch):
    import ctxret.storage.lexical as lexical_module
    from ctxret.errors import CtxretError

    monkeypatch.setattr(lexical_module, "fts5_available", lambda: False)
    with pytest.raises(CtxretError, match="FTS5.*lexical=False"):
        LexicalIndex()


def test_default_path_is_beside_chroma(tmp_path):
    assert default_lexical_path(tmp_path, "notes") == tmp_path / "ctxret-lexical-notes.sqlite3"
