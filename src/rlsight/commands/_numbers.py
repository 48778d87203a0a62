"""Reading a command-line number: one error shape for every numeric flag's parser."""

from __future__ import annotations

import argparse

__all__ = ["number"]


def number(text: str, what: str) -> float:
    """``text`` as a float, else argparse's error ``'<text>' is not <what>`` (``what`` says
    what the flag takes, so the range checks after it can stay the caller's)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
