"""The lexical file's write announcements with several writers: none can clear another's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from ctxret.storage.lexical import LexicalIndex


def test_one_writer_cannot_clear_anothers_announcement(tmp_path):
    path = tmp_path / "shared.sqlite3"
    a, b = LexicalIndex(path), LexicalIndex(path)  # two writers sharing the file
    a.journal.mark_pending()  # A is between its two writes (or crashed there)
    b.journal.mark_pending()
    b.write(["p1"], ["written by b"], ["t"], ["t#1"], settle=True)
    assert a.journal.pending and b.journal.pending  # used to be cleared by B: a crash of A then skipped the repair
    a.write(["p2"], ["written by a"], ["t"], ["t#2"], settle=True)
    assert not a.journal.pending and not b.journal.pending


def test_a_crashed_writers_announcement_survives_until_a_repair(tmp_path):
    path = tmp_path / "shared.sqlite3"
    crash = textwrap.dedent(
        """
        import os, sys
        from ctxret.storage.lexical import LexicalIndex
        LexicalIndex(sys.argv[1]).journal.mark_pending()
        os._exit(0)  # dies between the vector store write and the lexical write
        """
    )
    subprocess.run([sys.executable, "-c", crash, str(path)], check=True, timeout=120)
    live = LexicalIndex(path)
    live.journal.mark_pending()
    live.write(["p1"], ["fine"], ["t"], ["t#1"], settle=True)
    assert live.journal.pending  # the dead writer's announcement is still there
    live.journal.settle_all()  # what a full repair ends with: the dead writer's row goes
    assert not live.journal.pending
