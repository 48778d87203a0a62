"""``python -m rlsight.demo``."""

from __future__ import annotations

import sys

from rlsight.demo import main

sys.exit(main())
