"""The check every analysis command makes first: are its optional dependencies installed?"""

from __future__ import annotations

import importlib.util
import sys


def missing_extra(command: str, *modules: str, extra: str = "analysis") -> bool:
    """Print one line naming what to install and return True if any of ``modules`` is missing.

    Checked with ``find_spec``, without importing, so ``--help`` and a bad path stay fast.
    """
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        print(f"rlsight {command}: needs {', '.join(missing)}, from the {extra} extra; "
              f"install it with: pip install 'rlsight[{extra}]'", file=sys.stderr)
    return bool(missing)
