"""``python -m ctxret.evaluation eval controlled|threads|calibrate ...``"""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
