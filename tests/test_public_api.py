"""The public surface of ``ctxret``: pinned names, and a light import."""

from __future__ import annotations

import json
import subprocess
import sys

import ctxret

# The public names of ``ctxret``. Adding (or removing) a public name means editing this list.
PUBLIC_NAMES = [
    "__version__",
    # the facade and its configuration
    "ContextualIndex",
    "Store",
    "IndexConfig",
    "SearchSettings",
    "FusionSettings",
    "FusionMethod",
    # results and score scales
    "Group",
    "Hit",
    "IndexResult",
    "cosine_to_distance",
    "cosine_to_unit_interval",
    "distance_to_cosine",
    "unit_interval_to_cosine",
    # embedders
    "Embedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
    # errors
    "CallableError",
    "ClosedError",
    "ConfigMismatchError",
    "CtxretError",
    "EmbeddingError",
    "InputError",
    "InputTooLongError",
    "MissingExtraError",
    "StoreError",
]

# The stage functions live under named modules; each module's names are pinned too.
STAGE_NAMES = {
    "ctxret.ingest": [
        "Piece",
        "Source",
        "Turn",
        "append_messages",
        "context_vectors",
        "document_id",
        "document_turns",
        "label_pieces",
        "late_context_vectors",
        "piece_id",
        "plan_turns",
        "split_sections",
        "thread_messages",
        "turns_from_messages",
        "write_turns",
    ],
    "ctxret.query": [
        "Backends",
        "FusionMethod",
        "FusionSettings",
        "QueryVectors",
        "SearchPlan",
        "aquery_vectors",
        "arun_search",
        "convex",
        "expand_parents",
        "fuse",
        "passes_floor",
        "plan_search",
        "query_vectors",
        "render_groups",
        "rrf",
        "run_search",
        "split_prompt_chunks",
    ],
    "ctxret.query.split": [
        "LONG_PART_WORDS",
        "MAX_PARTS",
        "MIN_PART_CHARS",
        "WINDOW_WORDS",
        "asks",
        "split_prompt_chunks",
    ],
    "ctxret.query.time": [
        "TOLERANCE",
        "TimeExpression",
        "TimeWindow",
        "decide_windows",
        "find_time",
        "has_time_words",
        "part_windows",
        "resolve_now",
        "strip_time",
        "time_expressions",
        "timed_search_steps",
        "trigger_categories",
        "window_steps",
    ],
}

# Heavy or framework packages that ``import ctxret`` must not pull in.
NOT_IMPORTED = ["onnxruntime", "langchain_core", "llama_index"]


def test_all_is_pinned():
    assert sorted(ctxret.__all__) == sorted(PUBLIC_NAMES)


def test_stage_modules_are_pinned_and_resolve():
    import importlib

    for module, names in STAGE_NAMES.items():
        mod = importlib.import_module(module)
        assert sorted(mod.__all__) == sorted(names), module
        for name in names:
            assert getattr(mod, name, None) is not None, f"{module}.{name}"


def test_all_has_no_duplicates():
    assert len(ctxret.__all__) == len(set(ctxret.__all__))


def test_every_public_name_resolves():
    # Lazy names (ContextualIndex, embedders) resolve through ctxret.__getattr__ on first use.
    for name in ctxret.__all__:
        assert getattr(ctxret, name, None) is not None, name


def test_star_import_gives_exactly_all():
    ns: dict = {}
    exec("from ctxret import *", ns)
    assert sorted(k for k in ns if k != "__builtins__") == sorted(ctxret.__all__)


def test_version_is_a_string():
    assert isinstance(ctxret.__version__, str) and ctxret.__version__


def test_error_hierarchy():
    assert issubclass(ctxret.InputError, ctxret.CtxretError)
    assert issubclass(ctxret.InputError, ValueError)
    assert issubclass(ctxret.InputTooLongError, ctxret.InputError)
    assert issubclass(ctxret.ConfigMismatchError, ctxret.CtxretError)
    assert issubclass(ctxret.EmbeddingError, ctxret.CtxretError)
    assert issubclass(ctxret.CallableError, ctxret.CtxretError) and not issubclass(ctxret.CallableError, ValueError)
    assert issubclass(ctxret.MissingExtraError, ctxret.CtxretError)
    assert issubclass(ctxret.MissingExtraError, ImportError)


def test_missing_extra_message_names_the_package_and_the_extra():
    from ctxret.errors import missing_extra

    err = missing_extra("onnxruntime", "local", "The local embedder")
    assert isinstance(err, ctxret.MissingExtraError)
    assert "onnxruntime" in str(err) and 'pip install "ctxret[local]"' in str(err)


def test_import_ctxret_is_light():
    code = (
        "import sys, ctxret\n"
        f"heavy = {NOT_IMPORTED!r}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"import ctxret pulled in: {out.stdout.strip()}"


# Every package whose ``__all__`` holds names loaded on first use.
LAZY_PACKAGES = [
    "ctxret",
    "ctxret.embedders",
    "ctxret.ingest",
    "ctxret.query",
    "ctxret.query.split",
    "ctxret.query.time",
    "ctxret.adapters",
    "langchain_ctxret",
    "llamaindex_ctxret",
]


def test_dir_lists_every_public_name_before_it_is_loaded():
    # tab completion (a shell, a notebook) reads dir(): a lazy name must be listed before its first use, in a
    # fresh process (this one may have loaded them)
    code = (
        "import importlib, json\n"
        "out = {}\n"
        f"for name in {LAZY_PACKAGES!r}:\n"
        "    mod = importlib.import_module(name)\n"
        "    out[name] = sorted(set(mod.__all__) - set(dir(mod)))\n"
        "print(json.dumps(out))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {name: [] for name in LAZY_PACKAGES}
