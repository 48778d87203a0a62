"""Attribute dicts that many of rlsight's spans share, and that nothing ever changes.

A span opened with no attribute of its caller's carries only rlsight's stamps
(``rl.span_group``, ``thread.id``, ``rl.bucket``, ``rl.efficiency.category``), the same few
values on every span of one site and thread (``live=True`` and an efficiency span's
``rl.efficiency.measurement``, constants too, may be among them). Such spans share one dict
(issue #16): one object fewer per span for the garbage collector to track while the store
and the roll-up hold the span, and the store encodes each dict's attributes once. Sharing is safe because
nothing changes the dict: a LeanSpan replaces its plain dict with the SDK's attributes on
the first ``set_attribute`` (see :mod:`rlsight._lean`), readers only read, and the SDK's
path copies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["BY_ID", "BY_VALUES", "stamps"]

#: Shared dicts by ``id``: the store's codec asks whether a span's dict is one of them.
#: Each entry holds its dict, so an id here names that dict and no other.
BY_ID: Final[dict[int, dict[str, Any]]] = {}
#: Shared dicts by the values they were made from (see :func:`stamps`); read it first.
BY_VALUES: Final[dict[tuple[Any, ...], dict[str, Any]]] = {}
#: Distinct stamp sets kept; beyond it (threads come and go) the table starts over.
_MAX: Final = 1024


def stamps(key: tuple[Any, ...], items: Mapping[str, Any]) -> dict[str, Any]:
    """The shared dict of ``items`` (a copy, in its order), made once per ``key``.

    ``key`` must name ``items`` exactly (the same values of the same types): the caller
    builds both from the same fields.
    """
    shared = BY_VALUES.get(key)
    if shared is None:
        if len(BY_VALUES) >= _MAX:
            BY_VALUES.clear()
            BY_ID.clear()
        shared = BY_VALUES[key] = dict(items)
        BY_ID[id(shared)] = shared
    return shared
