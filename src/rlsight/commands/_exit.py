"""The ``rlsight`` exit codes, one table for every command (documented in docs/cli.md).

Commands import them from here, never from ``rlsight.cli``: the CLI imports the commands, so
the other direction would be a cycle.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_BUG",
    "EXIT_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PROBLEMS",
    "EXIT_STALLED",
    "EXIT_USAGE",
]

EXIT_OK: Final = 0
#: The command ran and found a problem you asked about (``--fail-under``, ``--fail-if-slower``).
EXIT_PROBLEMS: Final = 1
#: An exception rlsight did not expect: a bug, reported as one. ``--debug`` shows the traceback.
EXIT_BUG: Final = 1
#: A bad flag or flag value, an unusable output path, a missing extra.
EXIT_USAGE: Final = 2
#: The input is missing or unreadable: no run folder, no readable span.
EXIT_INPUT: Final = 3
#: ``rlsight watch`` only: a rank is stalled.
EXIT_STALLED: Final = 3
#: Interrupted with Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED: Final = 130
#: The reader of stdout went away (``| head``): 128 + SIGPIPE, as shells report other tools.
EXIT_BROKEN_PIPE: Final = 141
