"""Text from run files made safe to print on a terminal.

Its own module, free of numpy and rich, so that every command can escape what it prints,
``rlsight export`` included, which the core install (no ``analysis`` extra) runs.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["terminal_safe"]

#: Characters a terminal acts on instead of printing: C0/C1 controls (ESC starts a colour,
#: title or clear-screen sequence) and the bidirectional overrides that reorder what is shown.
_TERMINAL_CONTROL: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``text`` with every terminal control character shown as its escape (``\\x1b``).

    Run ids, algorithm names, worker groups and span names come from files anyone can
    write; printed raw, an ESC sequence in one could recolour, retitle or clear the reader's
    terminal. Newlines and tabs stay.
    """
    return _TERMINAL_CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
