"""Charge work thrown away later to waste: ``discard(group_ids, reason)``.

In async RL a rollout group is generated on one process and evicted as stale by the trainer
seconds later. An ``efficiency_span("wasted/...")`` can only wrap the eviction itself
(microseconds); the generation that is now worthless was recorded as productive. Tag the
work with the group it produced (``span(RL.GENERATION, "...", group_id=gid)``: the attribute
``rl.group_id``, inherited by every span under it, on any process) and call
:func:`discard` where the group is dropped. ``rlsight report`` then moves that work's
productive and overhead seconds to ``wasted``: in the fleet view of the ranks that did it,
and in the step that discarded it, with the reason (see ``docs/goodput.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from rlsight._semconv import DISCARD_COUNT, DISCARD_GROUP_IDS, DISCARD_REASON, DISCARD_SPAN
from rlsight._span_manager import LiveSpan
from rlsight.groups import GATE, RL

__all__ = ["discard"]

_GROUP: Final = RL.EFFICIENCY


def discard(group_ids: Iterable[str | int] | str | int, reason: str, /) -> None:
    """Record that the work of the rollout groups ``group_ids`` was thrown away.

    Emits one zero-length ``rl.discard`` span (group ``efficiency``, in every preset) with
    ``rl.discard.group_ids`` and ``rl.discard.reason``; the analysis does the charging, so
    the work may have run earlier, on any process. Call it in the step that discards.

    Args:
        group_ids: The ``group_id`` values the discarded work was tagged with (one or many).
        reason: Why, short and bounded (``"stale"``, ``"filtered"``, ``"aborted"``); the
            report totals waste per reason.

    Raises:
        ValueError: ``reason`` is empty or not a str, or a group id is not a str or int.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"discard(..., reason={reason!r}): give a short non-empty reason such as 'stale'")
    if _GROUP not in GATE.enabled:
        return
    ids = [group_ids] if isinstance(group_ids, (str, int)) else list(group_ids)
    for gid in ids:
        if isinstance(gid, bool) or not isinstance(gid, (str, int)):
            raise ValueError(f"discard(): group id {gid!r} must be a str or an int (the group_id "
                             "the discarded work's spans carry)")
    attrs = {
        DISCARD_GROUP_IDS: tuple(str(g) for g in ids),
        DISCARD_REASON: reason,
        DISCARD_COUNT: len(ids),
    }
    with LiveSpan(_GROUP, DISCARD_SPAN, attrs, clean=False):
        pass
