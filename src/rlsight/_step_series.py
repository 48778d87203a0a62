"""Dropping the SDK's aggregations of finished steps, so memory follows the steps in flight.

The OpenTelemetry SDK keeps one aggregation per attribute set per reader for the life of the
provider, even with delta temporality, and walks every one of them on each collection. Every
step-scoped point rlsight records carries ``rl.step``, so a run would hold (and walk) every
step's series forever: ~24 MiB and 130 ms a collection per reader after 1,000 steps of 21
series, linear in steps.

:class:`StepSeries` bounds that. Every recording of an ``rl.step`` point to one of rlsight's
instruments holds :attr:`StepSeries.lock` and names its step (:meth:`StepSeries.saw`). After
each collection of one of rlsight's delta readers, :meth:`StepSeries.prune`, under the same
lock (when it is free: a pruning never waits for a recording; the next collection prunes) and
the SDK's own lock of each instrument's table, drops the aggregations that

* carry ``rl.step`` with a step other than the :data:`KEEP_STEPS` most recently recorded, and
* hold nothing: the collection took their delta, and no measurement came since.

Such an aggregation would give no data point until a new measurement of its attributes, so
no exported point changes. Since recording holds the lock, no ``add()`` is half-way through
one being dropped: none raises and none is lost. If an old step is recorded again, the SDK
makes a new aggregation whose first point starts when it was made, where a kept one's would
have started at the collection before, and comes after its metric's other points (it is last
in the SDK's table); its value and end time are the same.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from rlsight._semconv import STEP

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader

__all__ = ["KEEP_STEPS", "PrunesAfterCollect", "StepSeries"]

#: Steps whose series are kept however idle: the latest recorded and the one before (an
#: engine delta or a goodput point may land just after the next step began).
KEEP_STEPS: Final = 2
#: ``report_internal_error``'s site name for a failed pruning.
SITE: Final = "metric-series-pruning"


class StepSeries:
    """The lock that step-scoped recording holds, its latest steps, and the pruning."""

    __slots__ = ("_instruments", "_off", "_recent", "lock")

    def __init__(self) -> None:
        #: Held by every recording of an ``rl.step`` point to an instrument of :meth:`adopt`.
        self.lock: Final = threading.RLock()
        self._recent: list[object] = []
        # Dict, not set: list(dict) is one C call, so prune copies it while adopt inserts.
        self._instruments: dict[object, None] = {}
        self._off = False

    def saw(self, step: object) -> None:
        """Note ``step`` as the latest recorded (call it holding :attr:`lock`)."""
        recent = self._recent
        if recent and recent[0] == step:
            return
        if step in recent:
            recent.remove(step)
        recent.insert(0, step)
        del recent[KEEP_STEPS:]

    def adopt(self, instrument: object) -> None:
        """Let :meth:`prune` drop ``instrument``'s finished steps (recorded under the lock)."""
        self._instruments[instrument] = None

    def forget(self) -> None:
        """Drop the adopted instruments (their meter is no longer the active one)."""
        self._instruments = {}

    def prune(self, storage: Any) -> int:
        """Drop ``storage``'s aggregations of finished steps; how many it dropped.

        ``storage`` is the SDK's ``MetricReaderStorage`` of one reader; only instruments the
        reader collects with delta temporality are touched (a cumulative point needs its
        aggregation for the rest of the run).
        """
        from opentelemetry.sdk.metrics._internal.aggregation import (
            _ExplicitBucketHistogramAggregation,
            _LastValueAggregation,
            _SumAggregation,
        )
        from opentelemetry.sdk.metrics.export import AggregationTemporality

        # These kinds hold their delta in _value, None once collected; others are kept.
        kinds = (_SumAggregation, _LastValueAggregation, _ExplicitBucketHistogramAggregation)
        delta = AggregationTemporality.DELTA
        temporality = storage._instrument_class_temporality
        matches = storage._instrument_view_instrument_matches
        dropped = 0
        # Never waits: a recording holding the lock may be slow (its caller's thread), and a
        # reader's flush or shutdown must not wait behind it; the next collection prunes.
        if not self.lock.acquire(blocking=False):
            return 0
        try:
            keep = list(self._recent)
            for instrument in list(self._instruments):
                if temporality.get(type(instrument)) is not delta:
                    continue
                for match in matches.get(instrument, ()):
                    with match._lock:  # the SDK's: collect() and new attribute sets take it
                        table = match._attributes_aggregation
                        done = [key for key, agg in table.items() if _finished(agg, keep, kinds)]
                        for key in done:
                            del table[key]
                        dropped += len(done)
        finally:
            self.lock.release()
        return dropped

    def after_collect(self, provider: MeterProvider, reader: MetricReader,
                      report: Callable[[str, BaseException], None]) -> None:
        """:meth:`prune` ``reader``'s storage; a failure is reported once and stops pruning."""
        if self._off:
            return
        try:
            storages = provider._measurement_consumer._reader_storages
            storage = storages.get(reader)
            if storage is not None:
                self.prune(storage)
        except Exception as exc:  # telemetry never kills the run: memory grows as without it
            self._off = True
            with contextlib.suppress(Exception):  # strict raises; the collection still stands
                report(SITE, exc)


def _finished(aggregation: Any, keep: list[object], kinds: tuple[type, ...]) -> bool:
    """Whether ``aggregation`` belongs to an old step and holds no measurement."""
    attributes = aggregation._attributes
    if not attributes or STEP not in attributes or attributes[STEP] in keep:
        return False
    return type(aggregation) in kinds and aggregation._value is None


class PrunesAfterCollect:
    """A metric reader mixin: after each collection that yields points, a pruning hook.

    The SDK marks ``MetricReader.collect`` final, so the hook runs from
    ``_receive_metrics``, which each collection with points reaches once the SDK's storage
    has taken every delta. A collection without points skips it: nothing was recorded since
    the last one, so there is nothing new to drop.
    """

    _after_collect: Callable[[Any], None] | None = None

    def prune_with(self, hook: Callable[[Any], None]) -> None:
        """Call ``hook(reader)`` after each of this reader's collections."""
        self._after_collect = hook

    def _collected(self) -> None:
        hook = self._after_collect
        if hook is not None:
            hook(self)
