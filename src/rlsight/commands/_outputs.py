"""What ``report`` and ``diff`` write: output paths checked before the work (a typo costs no
analysis of a large run), then one document in the same order and shape for both."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


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


def write_outputs(
    command: str,
    *,
    as_json: bool,
    document: Callable[[], dict[str, Any]],
    terminal: Callable[[Console], None],
    html: Path | None,
    page: Callable[[], str],
) -> None:
    """The ``--json`` document or the terminal view on stdout, then the ``--html`` page.

    The renderers come as callables so that each command imports rich and its HTML renderer
    only for the output asked for.
    """
    if as_json:
        sys.stdout.write(json.dumps(document(), indent=1, allow_nan=False) + "\n")
    else:
        from rich.console import Console

        # In a pipe rich assumes 80 columns and would truncate the per-step table.
        terminal(Console(highlight=False, width=None if sys.stdout.isatty() else 132))
    if html is not None:
        html.write_text(page(), encoding="utf-8")
        print(f"rlsight {command}: wrote {html}", file=sys.stderr)
