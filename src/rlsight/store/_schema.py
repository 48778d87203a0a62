"""The flat record the store reader yields: one per span, wire names resolved.

The analysis works on these, never on raw OTLP/JSON, so a change of the on-disk encoding
touches only the reader. ``resource`` is shared by every span of one process (one dict per
file, not per span), which keeps a million-span run within memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from rlsight._semconv import SERVICE_INSTANCE_ID, THREAD_ID

AttributeScalar: TypeAlias = str | bool | int | float
AttributeValue: TypeAlias = AttributeScalar | Sequence[AttributeScalar]

#: OTLP status codes (``opentelemetry.proto.trace.v1.Status.StatusCode``).
STATUS_UNSET: Final = 0
STATUS_OK: Final = 1
STATUS_ERROR: Final = 2


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One ended span as read back from a run's store.

    Times are integer nanoseconds since the epoch, as OTel records them, so sums of
    durations stay exact. ``parent_span_id`` is ``None`` for a root span.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttributeValue]
    resource: Mapping[str, AttributeValue]
    status_code: int = STATUS_UNSET
    status_message: str = ""
    kind: int = 1

    @property
    def duration_ns(self) -> int:
        """Length of the span; never negative, even for a span with a clock step."""
        return max(0, self.end_ns - self.start_ns)

    @property
    def timeline(self) -> tuple[str, int]:
        """The (process, thread) this span ran on: ``service.instance.id`` and ``thread.id``."""
        thread = self.attributes.get(THREAD_ID, 0)
        return (str(self.resource.get(SERVICE_INSTANCE_ID, "")), thread if isinstance(thread, int) else 0)


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    """A line the reader could not use, with where it was and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"
