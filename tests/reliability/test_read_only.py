"""Read-only stores: searched without writing to the folder or holding its lock; every write refused, clearly.

The defect: a store on read-only media could not even be searched (``OSError`` on the lock file; chromadb writes to
its folder when it opens it). Now ``read_only=True``, or a folder this process cannot write, is searched in a private
copy (``storage/snapshot.py``), the folder's lock taken only while copying, and every write is a ``StoreError``.
"""

from __future__ import annotations

import gc
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ctxret import ContextualIndex, Store
from ctxret.errors import InputError, StoreError

from .hash_embedder import HashEmbedder


class Counting(HashEmbedder):
    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        return super().embed(texts)


def build(folder: Path) -> dict[str, list[str]]:
    with ContextualIndex(folder, embedder=HashEmbedder(), progress=False) as index:
        for t in range(6):
            said = f"Alpha bravo report {t}. Charlie {t}."
            index.add_messages([{"role": "user", "content": said}], thread_id=f"t{t}")
        index.add_documents({"id": "guide.md", "text": "# Guide\nDelta echo foxtrot.\n## More\nGolf hotel."})
        found = searches(index)
    gc.collect()  # a connection an earlier test left to the collector: the folder as it settles, before the digest
    return found


def searches(index: ContextualIndex) -> dict[str, list[str]]:
    return {
        "unscoped": [h.id for g in index.search("alpha report 3", k=5, score_threshold=None) for h in g.hits],
        "scoped": [h.id for g in index.search("charlie", thread_id="t2", score_threshold=None) for h in g.hits],
        "document": [h.id for g in index.search("golf", thread_id="guide.md", per="document") for h in g.hits],
    }


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def refused_writes(index: ContextualIndex) -> None:
    n = index.store.count()
    calls = {
        "add_messages": lambda: index.add_messages([{"role": "user", "content": "New."}], thread_id="t9"),
        "add_documents": lambda: index.add_documents({"id": "guide.md", "text": "# Guide\nChanged."}),
        "delete": lambda: index.delete(thread_id="t1"),
        "clear": index.clear,
        "reindex": index.reindex,
    }
    for name, call in calls.items():
        with pytest.raises(StoreError, match="is open read-only .*nothing was written"):
            call()
        assert index.store.count() == n, name


def test_read_only_searches_a_copy_refuses_writes_and_leaves_the_folder_and_its_lock_alone(tmp_path):
    folder = tmp_path / "store"
    expected = build(folder)
    before = digest(folder)
    emb = Counting()
    index = ContextualIndex(folder, embedder=emb, progress=False, read_only=True)
    assert searches(index) == expected
    calls = emb.calls
    refused_writes(index)
    assert emb.calls == calls  # refused before anything was embedded
    assert index.stats()["store"] == str(folder) and index.stats()["pieces"] == index.store.count() > 0
    take = f"from ctxret.storage.lock import FolderLock; FolderLock({str(folder)!r}).acquire().release()"
    writer = subprocess.run([sys.executable, "-c", take], capture_output=True, text=True, timeout=300)
    assert writer.returncode == 0, writer.stderr  # the folder is not locked: a writer may open it meanwhile
    copy = index.store.chroma.path  # the private copy the searches read
    assert copy is not None and copy.exists() and Path(tempfile.gettempdir()) in copy.parents
    index.close()
    assert not copy.exists()  # removed on close
    after = digest(folder)
    assert {k: v for k, v in after.items() if not k.startswith("ctxret.lock")} == {
        k: v for k, v in before.items() if not k.startswith("ctxret.lock")
    }  # byte for byte (the writer process above only took the lock)


@pytest.fixture
def read_only_folder(tmp_path):
    """A store folder this process cannot write: a read-only bind mount (root), or a folder without write
    permission (others); skipped where neither can be made."""
    source, mount = tmp_path / "src", tmp_path / "ro"
    expected = build(source / "store")
    mount.mkdir()
    if os.geteuid() == 0:
        done = subprocess.run(["mount", "--bind", str(source), str(mount)], capture_output=True)
        if done.returncode != 0 or subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)]).returncode != 0:
            subprocess.run(["umount", str(mount)], capture_output=True)
            pytest.skip("cannot make a read-only mount here (root without mount rights)")
        try:
            yield mount / "store", expected
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    else:
        for p in [*(source / "store").rglob("*"), source / "store"]:
            p.chmod(p.stat().st_mode & ~0o222)
        try:
            yield source / "store", expected
        finally:
            for p in [source / "store", *(source / "store").rglob("*")]:
                p.chmod(p.stat().st_mode | 0o200)


def test_a_store_on_read_only_media_is_searched_and_refuses_writes(read_only_folder, caplog):
    folder, expected = read_only_folder
    assert not os.access(folder, os.W_OK)
    with ContextualIndex(folder, embedder=HashEmbedder(), progress=False) as index:  # no read_only=True needed
        assert "cannot be written by this process: it is opened read-only" in caplog.text
        assert searches(index) == expected
        refused_writes(index)


def test_read_only_is_a_store_argument_everywhere(tmp_path):
    assert Store.embedded(tmp_path, read_only=True).read_only
    assert Store.of(str(tmp_path), read_only=True).read_only
    assert Store.server("127.0.0.1", 8000, read_only=True).read_only
    for bad in (
        lambda: Store.memory(read_only=True),
        lambda: ContextualIndex(in_memory=True, read_only=True, embedder=HashEmbedder()),
        lambda: Store.embedded(tmp_path, read_only="yes"),
    ):
        with pytest.raises(InputError, match="read_only"):
            bad()
    with pytest.raises(StoreError, match="no store to open read-only at"):
        ContextualIndex(tmp_path / "nothing-here", embedder=HashEmbedder(), read_only=True)
    build(tmp_path / "store")
    with pytest.raises(StoreError, match="has no collection 'other' to open read-only"):
        ContextualIndex(tmp_path / "store", collection="other", embedder=HashEmbedder(), read_only=True)
