"""What static reading can tell about a string value: every value it can take, or why not.

A value the check cannot see is reported as such, never guessed: a guard that guesses turns
into a tautology. The combinators keep that rule: anything unknown makes the whole unknown,
and a value built on the enclosing function's parameter is *forwarded* (a wrapper).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["Resolved", "concat", "known", "prefixed", "union", "unknown"]

#: Past this many possible values an expression is reported as unknown, not enumerated.
_MAX_VALUES: Final = 64


@dataclass(frozen=True, slots=True)
class Resolved:
    """What static reading could tell about a string value at a call site.

    Exactly one of three shapes: ``values`` (every string it can be), ``forwarded`` (it is
    the enclosing function's parameter of that name) or ``unknown`` (why it can't be read).
    """

    values: frozenset[str] = frozenset()
    forwarded: str | None = None
    unknown: str | None = None

    @property
    def is_known(self) -> bool:
        """Whether ``values`` holds every value this expression can take."""
        return self.forwarded is None and self.unknown is None

    def describe(self) -> str:
        """Short text for messages: the value(s), or why there are none."""
        if self.forwarded is not None:
            return f"parameter {self.forwarded!r}"
        if self.unknown is not None:
            return self.unknown
        return " or ".join(repr(v) for v in sorted(self.values))


def known(*values: str) -> Resolved:
    """Exactly these values."""
    return Resolved(values=frozenset(values))


def unknown(reason: str) -> Resolved:
    """Not readable statically; ``reason`` says why, for the message."""
    return Resolved(unknown=reason)


def _first_undecided(parts: Sequence[Resolved]) -> Resolved | None:
    """The part that decides a combination alone: the first unknown one, else the first that
    forwards a parameter; ``None`` when every part is a set of values."""
    for p in parts:
        if p.unknown is not None:
            return p
    for p in parts:
        if p.forwarded is not None:
            return p
    return None


def union(parts: Sequence[Resolved]) -> Resolved:
    """Any one of ``parts`` (a conditional, a local assigned twice)."""
    if (undecided := _first_undecided(parts)) is not None:
        return undecided
    values = frozenset(itertools.chain.from_iterable(p.values for p in parts))
    if len(values) > _MAX_VALUES:
        return unknown(f"more than {_MAX_VALUES} possible values")
    return Resolved(values=values)


def concat(parts: Sequence[Resolved]) -> Resolved:
    """``parts`` joined in order (``+``, an f-string), every combination of their values."""
    # A prefix glued onto a parameter is still a wrapper; anything unknown makes it unknown.
    if (undecided := _first_undecided(parts)) is not None:
        return undecided
    combos = 1
    for p in parts:
        combos *= max(1, len(p.values))
    if combos > _MAX_VALUES:
        return unknown(f"more than {_MAX_VALUES} possible values")
    return Resolved(values=frozenset("".join(c) for c in itertools.product(*(p.values for p in parts))))


def prefixed(prefix: str, value: Resolved, *, dots: bool = False) -> Resolved:
    """``prefix`` + each known value (``/`` -> ``.`` with ``dots``); a non-known value as is."""
    if not value.is_known:
        return value
    return Resolved(
        values=frozenset(prefix + (v.replace("/", ".") if dots else v) for v in value.values)
    )

