"""``python -m ctxret``: the same as the ``ctxret`` command."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
