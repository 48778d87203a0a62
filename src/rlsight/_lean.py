"""A shorter way to start rlsight's own spans: the SDK's span, without the SDK's detours.

Profiling an enabled ``span()`` (issue #16) showed about half its start in work that, for
rlsight's spans under the provider rlsight builds, always gives the same answer: asking the
default ``ParentBased(ALWAYS_ON)`` sampler (it samples unless the parent was not sampled),
the tracer's self-metrics (a no-op unless enabled) and re-validating attributes that
:func:`rlsight.spans._clean_attributes` already reduced to scalars. :class:`LeanStarter`
builds the very same SDK ``Span`` object the tracer would (same class, same fields, same
processors, same id generator calls in the same order), so the store, the OTLP exporters and
every span processor see nothing different; only the redundant checks are skipped.

It steps aside (``start`` returns ``None`` and the caller uses the tracer) whenever the
shortcut could differ: a sampler other than the default (``OTEL_TRACES_SAMPLER``), the SDK's
internal metrics turned on, a disabled tracer, a parent that was not sampled. Attributes
that are not plain scalars, or text over the length limit, go through the SDK's own
cleaning. Foreign spans (instrumentation, the user's tracer) never come here.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Tracer, _Span
from opentelemetry.sdk.trace._tracer_metrics import NoOpTracerMetrics
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import (
    SpanContext,
    SpanKind,
    TraceFlags,
    get_current_span,
)
from opentelemetry.trace.status import Status, StatusCode

__all__ = ["LeanStarter"]

_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_SAMPLED_RANDOM: Final = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_INTERNAL: Final = SpanKind.INTERNAL
_UNSET: Final = Status(StatusCode.UNSET)
#: Value types the SDK's cleaning keeps as they are (exact types: a subclass goes through it).
_PLAIN: Final = frozenset({str, bool, int, float})


def _default_sampler(sampler: object) -> bool:
    """``ParentBased(ALWAYS_ON)`` with its default delegates: what rlsight's provider uses."""
    return (
        type(sampler) is ParentBased
        and getattr(sampler, "_root", None) is ALWAYS_ON
        and getattr(sampler, "_remote_parent_sampled", None) is ALWAYS_ON
        and getattr(sampler, "_local_parent_sampled", None) is ALWAYS_ON
        and getattr(sampler, "_remote_parent_not_sampled", None) is ALWAYS_OFF
        and getattr(sampler, "_local_parent_not_sampled", None) is ALWAYS_OFF
    )


class LeanStarter:
    """Starts rlsight's spans as ``tracer.start_span`` would, minus the redundant checks."""

    __slots__ = (
        "_ids",
        "_info",
        "_limits",
        "_processor",
        "_resource",
        "_sampler",
        "_scope",
        "usable",
    )

    def __init__(self, tracer: Any) -> None:
        self.usable = (
            type(tracer) is Tracer
            and _default_sampler(getattr(tracer, "sampler", None))
            and type(getattr(tracer, "_tracer_metrics", None)) is NoOpTracerMetrics
            and bool(tracer._is_enabled())
        )
        if not self.usable:
            return
        self._ids = tracer.id_generator
        self._limits = tracer._span_limits
        self._processor = tracer.span_processor
        self._resource = tracer.resource
        self._scope = tracer._instrumentation_scope
        self._info = tracer.instrumentation_info
        self._sampler = tracer.sampler

    def start(self, name: str, attributes: Mapping[str, Any], start_time: int | None) -> _Span | None:
        """A started SDK span, or ``None`` where the tracer must decide (see the module doc)."""
        ids = self._ids
        parent: SpanContext | None = get_current_span().get_span_context()
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = ids.generate_trace_id()
            random_id = ids.is_trace_id_random()
            trace_state = None
        else:
            flags = parent.trace_flags
            if not flags.sampled:
                return None  # dropped by the sampler: the tracer returns its non-recording span
            trace_id = parent.trace_id
            random_id = flags.random_trace_id
            trace_state = parent.trace_state
        context = SpanContext(trace_id, ids.generate_span_id(), is_remote=False,
                              trace_flags=_SAMPLED_RANDOM if random_id else _SAMPLED,
                              trace_state=trace_state)
        limits = self._limits
        attrs = BoundedAttributes(limits.max_span_attributes, None, immutable=False,
                                  max_value_len=limits.max_span_attribute_length)
        maxlen, max_text = attrs.maxlen, attrs.max_value_len
        plain = maxlen is None or len(attributes) <= maxlen
        if plain:
            for value in attributes.values():  # a loop: all() over a generator costs 2x
                kind = type(value)
                if kind not in _PLAIN or (kind is str and max_text is not None
                                          and len(value) > max_text):
                    plain = False  # the SDK converts or truncates it (and warns): its way
                    break
        if plain:
            attrs._dict.update(attributes)  # already what the SDK's cleaning would keep
        elif attributes:
            attrs._set_items(attributes)
        span: _Span = object.__new__(_Span)
        # ReadableSpan's fields, then Span's: what _Span.__init__ sets for these arguments.
        span._name = name
        span._context = context
        span._kind = _INTERNAL
        span._instrumentation_info = self._info
        span._instrumentation_scope = self._scope
        span._parent = parent
        span._start_time = None
        span._end_time = None
        span._resource = self._resource
        span._status = _UNSET
        span._sampler = self._sampler
        span._trace_config = None
        span._record_exception = True
        span._set_status_on_exception = True
        span._span_processor = self._processor
        span._limits = limits
        span._lock = threading.Lock()
        span._attributes = attrs
        span._events = BoundedList(limits.max_events)
        span._links = BoundedList(limits.max_links)
        span._record_end_metrics = None
        span.start(start_time=start_time, parent_context=None)
        return span

