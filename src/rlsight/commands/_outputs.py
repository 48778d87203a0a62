"""Output paths are checked before the work, so a typo costs no analysis of a large run."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def unusable_output(command: str, flag: str, path: Path, example: str) -> bool:
    """Print one line saying why ``path`` cannot be written and return True, else False.

    Catches what would otherwise fail only after the run was read: a folder given as the file,
    a parent folder that does not exist, a file or folder without write permission.
    """
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        problem = f"is a folder; pass a file name such as {path / example}"
    elif not parent.is_dir():
        problem = f"cannot be written: folder {parent} does not exist; create it or pass another path"
    elif not os.access(path if path.exists() else parent, os.W_OK):
        problem = (f"cannot be written: no write permission on {path if path.exists() else parent}; "
                   "pass a path you can write")
    else:
        return False
    print(f"rlsight {command}: {flag} {path} {problem}", file=sys.stderr)
    return True
