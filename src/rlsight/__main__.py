"""``python -m rlsight``: the ``rlsight`` command, for environments without the entry point."""

from __future__ import annotations

import sys

from rlsight.cli import main

sys.exit(main())
