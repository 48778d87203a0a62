"""A span processor that batches ended spans for one exporter, bounded in every dimension.

rlsight uses it for both the local store and OTLP, instead of the SDK's batch processor,
for three reasons: ended spans must reach the local store within 200 ms (a SIGKILLed Ray
actor runs no exit hook); every drop is counted by reason; and shutdown honours one deadline.
The SDK's ``force_flush`` drains its queue whatever the timeout says, which against an
unreachable collector turns a 5 s budget into half a minute.
"""

from __future__ import annotations

import collections
import itertools
import logging
import operator
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.sdk.trace import SpanProcessor

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

ExportFn = Callable[[Sequence["ReadableSpan"]], bool]

_log = logging.getLogger("rlsight")


class BatchingSpanProcessor(SpanProcessor):
    """Queue ended spans; a daemon thread hands them to ``export`` every ``interval_s``.

    Args:
        export: Takes a batch, returns whether it was delivered. It may raise; that counts
            as a failed batch and is logged once by the caller's guard.
        name: For thread names and reports (``"store"``, ``"otlp"``).
        interval_s: Longest time an ended span waits in the queue.
        max_queue: Spans beyond this are dropped and counted (``queue_full``).
        max_batch: Largest batch handed to ``export`` at once.
        wake_at: Queue length at which an ended span wakes the export thread before its
            interval is up (default ``max_batch``). A writer that sleeps the whole interval
            while one thread produces flat out finds its oldest span past ``help_after_s``,
            and the producer starts encoding its own spans (``prepare``), which costs it
            more than the writer's batch encoding costs the process.
        on_error: Called (on the export thread) with an exception ``export`` raised.
        close: Releases the exporter (its HTTP session or gRPC channel) at shutdown, within
            what is left of the budget.
        max_lag_s: When set, a span that ends while the oldest span not yet exported was
            queued more than this long ago is dropped and counted (``lag``; when it was queued
            is bounded below by its end and by the last time the queue was empty, so a span
            ended in the past by ``record_span`` reads as new): an exporter that cannot
            keep up costs spans, never seconds of them held in memory.
        on_drops: Called on the export thread after a drain in which the drop counts grew
            (to warn once and to get the counts recorded while the run goes).
        prepare: When set, and the oldest span not yet exported was queued over
            ``help_after_s`` ago, ``on_end`` queues ``prepare(span)`` instead of the span: the
            app thread does the costly conversion so one export thread keeps up with many app
            threads.
            ``export`` then receives a mix of spans and prepared items.
        help_after_s: How far behind the export thread must be before app threads help.
        size_of: When set, bounds the queue and each batch in bytes as well as in spans:
            ``size_of(span)`` estimates what a span costs held in memory and sent. A span
            larger than ``max_batch_bytes`` alone is dropped (``too_large``), so it cannot
            take the rest of its batch down with it (gRPC refuses messages over 4 MiB).
        max_queue_bytes: Queue bound in ``size_of`` bytes (``queue_full`` beyond it).
        max_batch_bytes: Largest batch in ``size_of`` bytes.
        takes_rows: When set, called with an rlsight ``LeanStarter`` (once per starter and
            set of processors): whether ``export`` (and ``prepare``) take that starter's plain
            spans as rows, ``(start, end, trace id, span id, parent span id or 0, name,
            attributes)``. A queued row holds no span object: the span is freed when its
            block ends, not kept alive (and traversed by the garbage collector) until its
            batch is written.
    """

    def __init__(
        self,
        export: ExportFn,
        *,
        name: str,
        interval_s: float = 0.1,
        max_queue: int = 200_000,
        max_batch: int = 4096,
        wake_at: int | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        close: Callable[[], object] | None = None,
        max_lag_s: float | None = None,
        on_drops: Callable[[BatchingSpanProcessor], None] | None = None,
        prepare: Callable[[ReadableSpan], Any] | None = None,
        help_after_s: float = 0.05,
        size_of: Callable[[ReadableSpan], int] | None = None,
        max_queue_bytes: int = 64 * 2**20,
        max_batch_bytes: int = 2 * 2**20,
        takes_rows: Callable[[Any], bool] | None = None,
    ) -> None:
        self.name = name
        self._export = export
        self._interval = interval_s
        self._max_queue = max_queue
        self._max_batch = max_batch
        self._wake_at = max_batch if wake_at is None else max(1, min(wake_at, max_batch))
        self._on_error = on_error
        self._close = close
        self._max_lag_ns = None if max_lag_s is None else int(max_lag_s * 1e9)
        self._on_drops = on_drops
        self._prepare = prepare
        self._help_after_ns = int(help_after_s * 1e9)
        self._size_of = size_of
        self._max_queue_bytes = max_queue_bytes
        self._max_batch_bytes = max_batch_bytes
        self._takes_rows = takes_rows
        self._bytes_lock = threading.Lock()
        #: ``size_of`` bytes queued now (0 without ``size_of``).
        self.queued_bytes = 0
        self._drops_seen = 0
        #: End time of the oldest span of the batch being exported (0 when none is).
        self._in_flight_oldest_ns = 0
        #: The queue's first item when ``on_end`` last looked, and its end time: the head
        #: changes once per batch taken, so most spans read its end time from here.
        self._head: object = None
        self._head_end_ns = 0
        #: When the export thread last found the queue empty: every span queued now was queued
        #: after it, so a span ended with a time in the past (``record_span``) does not read
        #: as a writer seconds behind.
        self._emptied_ns = time.time_ns()  # empty now
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        #: ``_stop.is_set()`` as a plain attribute: every ended span reads it.
        self._stopped = False
        self._watch_lag = max_lag_s is not None or prepare is not None
        self._export_lock = threading.Lock()
        # Guards the queue-to-batch hand-over and the counters, so shutdown can account for
        # a batch an exporter still holds (in flight) exactly once.
        self._count_lock = threading.Lock()
        self._in_flight = 0
        self._abandoned = False
        self.exported = 0
        self.dropped: collections.Counter[str] = collections.Counter()
        #: Export errors seen on the export thread, for a strict caller to raise at shutdown.
        self.errors: list[Exception] = []
        self._thread = threading.Thread(target=self._run, name=f"rlsight-{name}", daemon=True)
        self._thread.start()

    #: Its ``on_end`` may be handed the ended span itself (rlsight._lean): it only reads it.
    reads_span_in_place: Final = True

    def lean_on_row(self, starter: Any) -> Callable[[Any], None] | None:
        """What the plain spans of an rlsight ``LeanStarter`` end through (``rlsight._lean``):
        when ``takes_rows`` accepts the starter, :meth:`on_end` with the span's row of fields
        (which the export encodes as it would the span, so the span can go as soon as its
        block ends); else ``None`` (``on_end`` with the span)."""
        if self._takes_rows is not None and self._takes_rows(starter):
            return self.on_end
        return None

    def on_end(self, span: Any) -> None:
        """Queue an ended span, or a row of a starter ``takes_rows`` took (see :meth:`lean_on_row`)."""
        if self._stopped:
            self.dropped["after_shutdown"] += 1
            return
        queue = self._queue
        if len(queue) >= self._max_queue:
            self.dropped["queue_full"] += 1
            return
        if self._watch_lag:
            # When the oldest span not yet exported was queued (0 when none is waiting):
            # oldest_waiting_ns(), inlined (this runs on every ended span).
            oldest = self._in_flight_oldest_ns
            if not oldest and queue:
                try:
                    head = queue[0]
                except IndexError:  # the export thread just took the last one
                    head = None
                if head is self._head:  # the same head as for the last span: its end is known
                    oldest = self._head_end_ns
                elif head is not None:
                    oldest = self._head_end_ns = self._queued_ns(head)
                    self._head = head
            behind = 0
            if oldest:
                if type(span) is tuple:  # a row: its end time is its second field
                    end = span[1]
                else:
                    try:  # the SDK's field behind ``end_time``, read without the property's call
                        end = span._end_time
                    except AttributeError:
                        end = span.end_time
                behind = (end or 0) - oldest
            if self._max_lag_ns is not None and behind > self._max_lag_ns:
                self.dropped["lag"] += 1
                return
            if self._prepare is not None and behind > self._help_after_ns:
                queue.append(self._prepare(span))
                if behind > 2 * self._help_after_ns:
                    self._help_drain(wait_s=0.1 if behind > 3 * self._help_after_ns else 0.0)
                return
        if self._size_of is not None and not self._reserve(self._size_of(span)):
            return
        queue.append(span)
        size = len(queue)
        # ``==`` for the early wake (once per batch, not a set() per span above it; two
        # threads appending between their length reads may step over it, then the full
        # batch below or the interval wakes the writer).
        if size == self._wake_at or size >= self._max_batch:
            self._wake.set()

    def _queued_ns(self, item: Any) -> int:
        """A lower bound of when ``item`` (a span, a prepared span or a row) was queued: its
        end time, or when the queue was last found empty, whichever is later (it was queued
        after both)."""
        return max(ended_at(item), self._emptied_ns)

    def _reserve(self, size: int) -> bool:
        """Count ``size`` bytes in, or count the span dropped (``too_large``/``queue_full``)."""
        if size > self._max_batch_bytes:
            self.dropped["too_large"] += 1
            return False
        with self._bytes_lock:
            if self.queued_bytes + size > self._max_queue_bytes:
                self.dropped["queue_full"] += 1
                return False
            self.queued_bytes += size
        return True

    @property
    def dropped_total(self) -> int:
        """Spans dropped so far, every reason together."""
        return sum(self.dropped.values())

    @property
    def queued(self) -> int:
        """Spans waiting to be exported."""
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        """Spans of the batch being exported now (0 when none is)."""
        return self._in_flight

    def oldest_waiting_ns(self) -> int:
        """When the oldest span not yet exported, in flight or queued, was queued (a lower
        bound, see :meth:`_queued_ns`; 0: none).

        How far behind the export thread is, as :meth:`on_end` judges it (which inlines this
        on every span) and as ``benchmarks/bench_load.py`` samples it.
        """
        oldest = self._in_flight_oldest_ns
        if not oldest:
            try:
                oldest = self._queued_ns(self._queue[0])
            except IndexError:  # the export thread just took the last one
                oldest = 0
        return oldest

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            self._drain(deadline=None)
            self._report_drops()

    def _report_drops(self) -> None:
        total = self.dropped_total
        if total == self._drops_seen or self._on_drops is None:
            return
        self._drops_seen = total
        try:
            self._on_drops(self)
        except Exception as exc:  # the export thread must outlive its drop reporter
            self._report(exc)

    def _help_drain(self, wait_s: float) -> None:
        """Export one batch on this app thread, waiting up to ``wait_s`` for another export.

        Encoding on the app threads is not always enough: with several threads producing
        flat out, the export thread gets one GIL share among many and still falls behind the
        write-through bound. An app thread that finds the writer twice the help threshold
        behind writes one batch itself if no export is running; three times behind, it waits
        for the running one (at most ``wait_s``: a stalled disk costs a producer a bounded
        pause, then the lag cap drops spans instead). The producers slow down by the cost of
        writing instead of queueing seconds of spans.
        """
        lock = self._export_lock
        if lock.acquire(timeout=wait_s) if wait_s > 0 else lock.acquire(blocking=False):
            try:
                self._drain_locked(deadline=None, batches=1)
            finally:
                lock.release()

    def _drain(self, deadline: float | None) -> bool:
        """Export everything queued now; False if the deadline passed first.

        The export lock is taken per batch, so an app thread that has come to help
        (:meth:`_help_drain`) gets its turn between two batches instead of waiting for the
        whole backlog.
        """
        while True:
            # Taken even when the queue is empty: a batch another thread holds is not
            # exported until its export returns, and a flush must wait for it.
            with self._export_lock:
                if not self._drain_locked(deadline, batches=1):
                    return False
                seen = time.time_ns()  # before the look: a span queued after it is later
                if not self._queue:
                    self._emptied_ns = seen
                    return True

    def _drain_locked(self, deadline: float | None, batches: int | None) -> bool:
        """The export loop of :meth:`_drain`, under the export lock: at most ``batches``."""
        while self._queue:
            if batches is not None:
                if batches == 0:
                    return True
                batches -= 1
            if deadline is not None and time.monotonic() >= deadline:
                return False
            with self._count_lock:
                seen = time.time_ns()  # before the take: a span still queued after it is later
                batch = self._take_batch()
                self._in_flight = len(batch)
                self._in_flight_oldest_ns = self._queued_ns(batch[0]) if batch else 0
                if not self._queue:  # taken whole: what is queued from now on came after ``seen``
                    self._emptied_ns = seen
            error: Exception | None = None
            try:
                ok = self._export(batch)
            except Exception as exc:  # the exporter's failure must not end the thread
                ok, error = False, exc
            with self._count_lock:
                self._in_flight = 0
                self._in_flight_oldest_ns = 0
                if not self._abandoned:  # else shutdown gave up on this batch and counted it
                    if ok:
                        self.exported += len(batch)
                    else:
                        self.dropped["export_failed"] += len(batch)
            if error is not None:
                self._report(error)
        return True

    def _take_batch(self) -> list[ReadableSpan]:
        """The next batch off the queue (under the count lock; only its holder pops)."""
        queue, size_of = self._queue, self._size_of
        if size_of is None:
            # One C loop: the queue only grows meanwhile, so it holds these ``n`` spans.
            n = min(len(queue), self._max_batch)
            return list(map(operator.call, itertools.repeat(queue.popleft, n)))
        batch: list[ReadableSpan] = []
        room = self._max_batch_bytes
        while queue and len(batch) < self._max_batch:
            size = size_of(queue[0])
            if batch and size > room:
                break  # the next batch starts with it
            room -= size
            with self._bytes_lock:
                self.queued_bytes -= size
            batch.append(queue.popleft())
        return batch

    def _report(self, error: Exception) -> None:
        """Hand an export error to ``on_error``; whatever that raises stays off this thread."""
        self.errors.append(error)
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception as exc:  # the export thread must outlive a strict error handler
                self.errors.append(exc)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export what is queued, in the caller's thread, within ``timeout_millis``."""
        return bounded(lambda: self._drain(time.monotonic() + timeout_millis / 1000),
                        timeout_millis / 1000)

    def shutdown(self, timeout_millis: int = 30_000) -> bool:  # type: ignore[override]
        """Stop accepting spans, flush within the budget, count what is left as dropped."""
        if self._stop.is_set():  # the TracerProvider shuts its processors down a second time
            return not self._abandoned
        deadline = time.monotonic() + timeout_millis / 1000
        self._stop.set()
        self._stopped = True
        self._wake.set()
        done = self.force_flush(timeout_millis)
        if self._close is not None:  # release the exporter's session or channel
            close = self._close
            bounded(lambda: close() is None or True, max(0.0, deadline - time.monotonic()))
        with self._count_lock:
            # A batch an exporter still holds (a hung collector) was not delivered within
            # the budget either: count it now, and not again if the export ends later.
            left = len(self._queue) + (0 if done else self._in_flight)
            if not done:
                self._abandoned = True
            if left:
                self.dropped["shutdown_timeout"] += left
                self._queue.clear()
                with self._bytes_lock:
                    self.queued_bytes = 0
        return done and not left


def ended_at(item: Any) -> int:
    """When a queued item (a span, a prepared span or a row) ended, in ns (0: unknown)."""
    return (item[1] if type(item) is tuple else item.end_time) or 0


#: What a queued span costs besides its attribute text: the SDK span object, its context,
#: its lists and dicts (measured: ~2 KiB held per span against a dead collector).
_SPAN_OVERHEAD_BYTES: Final = 2048


def span_size(span: ReadableSpan) -> int:
    """Approximate bytes ``span`` holds in a queue and takes in an export request."""
    size = _SPAN_OVERHEAD_BYTES
    for value in (span.attributes or {}).values():
        size += len(value) if isinstance(value, str) else 16
    for event in span.events:
        size += 128
        for value in (event.attributes or {}).values():
            size += len(value) if isinstance(value, str) else 16
    return size


def bounded(fn: Callable[[], bool], timeout_s: float) -> bool:
    """Run ``fn`` in a daemon thread; give up waiting after ``timeout_s`` (it may go on)."""
    result: list[bool] = []

    def run() -> None:
        try:
            result.append(fn())
        except Exception as exc:  # a failed shutdown step is reported as failed, not as a dead thread
            # One line at WARNING (a collector that is down is an expected condition, not a
            # crash to dump a traceback for); the traceback goes to DEBUG for whoever digs.
            _log.warning(
                "rlsight: a telemetry flush or shutdown step failed (%s: %s); the run is "
                "unaffected, the local store keeps what it wrote",
                type(exc).__name__, " ".join(str(exc).split())[:300],
            )
            _log.debug("rlsight: the failed flush or shutdown step", exc_info=True)

    thread = threading.Thread(target=run, name="rlsight-bounded", daemon=True)
    thread.start()
    thread.join(max(0.0, timeout_s))
    return bool(result and result[0])
