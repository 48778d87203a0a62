"""A shorter way to start and end rlsight's own spans: an SDK span, without the SDK's detours.

Profiling an enabled ``span()`` (issue #16) put about half of its start in work that, for
rlsight's spans under the provider rlsight builds, always gives the same answer: asking the
default ``ParentBased(ALWAYS_ON)`` sampler (it samples unless the parent was not sampled),
the tracer's self-metrics (a no-op unless enabled) and re-validating attributes that
:func:`rlsight._span_manager.clean_attributes` already reduced to scalars; and most of its
end in the processors' fan-out and the ``ReadableSpan`` copy the SDK makes for them.

:class:`LeanStarter` makes a :class:`LeanSpan`: an SDK ``Span`` subclass (foreign child
spans, carriers, exporters and ``trace.get_current_span()`` see an SDK span), with the same
field values the tracer would give it and ids drawn from the same generator in the same
order, so the store, the OTLP exporters and every processor read the same span. What differs
is inside: its attributes stay the plain dict rlsight already cleaned until someone sets one
(then the SDK's ``BoundedAttributes``), its event and link lists are made on first use, the
fields every span shares live on the class, and start and end call the provider's
processors directly. rlsight's own processors (the store, start records, the step roll-up,
OTLP: classes that declare ``reads_span_in_place``) get the span itself, or, at the end of a
plain span, its :data:`Row` of fields, made once for those that file rows (the store, the
roll-up). The step roll-up is not called at all for most spans: it hands the route its open
spans and rows (:data:`Filing`), and the span files itself there as it starts and ends; any
other (a
``span_processors=`` entry, one added to the provider later) gets what the SDK gives it:
``on_start`` with the span, ``_on_ending``, and one ``ReadableSpan`` copy per end. The
store encodes a LeanSpan from its fields as it does an SDK span (it overrides none of
``ReadableSpan``'s properties), line for line the same.

It steps aside (``start`` returns ``None`` and the caller uses the tracer) whenever the
shortcut could differ: a sampler other than the default (``OTEL_TRACES_SAMPLER``), the SDK's
internal metrics turned on, a disabled tracer, a parent that was not sampled. Attributes
that are not plain scalars, or text over the length limit, go through the SDK's own
cleaning. Foreign spans (instrumentation, the user's tracer) never come here.
"""
from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk import trace as _sdk
from opentelemetry.sdk.trace import SpanProcessor, Tracer, _Span
from opentelemetry.sdk.trace._tracer_metrics import NoOpTracerMetrics
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import (
    DEFAULT_TRACE_STATE,
    Span,
    SpanContext,
    SpanKind,
    TraceFlags,
)
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.trace.status import Status, StatusCode

from rlsight._current import _VAR, current_span
from rlsight._ids import SeedIndependentIdGenerator

__all__ = ["Filing", "LeanSpan", "LeanStarter", "Row", "SpanFiler"]

_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_SAMPLED_RANDOM: Final = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_INTERNAL: Final = SpanKind.INTERNAL
_UNSET: Final = Status(StatusCode.UNSET)
#: Value types the SDK's cleaning keeps as they are (exact types: a subclass goes through it).
_PLAIN: Final = frozenset({str, bool, int, float})
_NO_TRACE_STATE: Final = DEFAULT_TRACE_STATE
_NO_ITEMS: Final[tuple[Any, ...]] = ()
_NOT_SEEN: Final = object()
#: Shared attribute dicts a starter remembers as plain; beyond it, it starts over.
_PLAIN_SHARED_MAX: Final = 1024
_new_tuple: Final = tuple.__new__
_new_object: Final = object.__new__
#: Guards the making of a LeanSpan's own lock, and the end of a span that has none. Held
#: for a few bytecodes, never around a call out of this module (no logging, no processor).
_LOCKS: Final = threading.Lock()
#: The SDK's own logger: the warnings a LeanSpan gives are the ones an SDK span gives.
_sdk_log: Final = logging.getLogger(_sdk.__name__)

#: How a LeanSpan reaches the provider's processors: their ``on_start`` methods (each called
#: with the span and the parent context, positionally); their
#: ``on_end`` methods when all are rlsight's (each takes the span itself); else ``None`` there
#: and, third, the ``_on_ending`` methods of the others and every ``on_end`` with whether it
#: wants a ``ReadableSpan`` copy (a processor that is not rlsight's: the SDK gives it one);
#: fourth, when all are rlsight's and one of them files a plain span's row (see :func:`_route`),
#: what a plain span ends through: the callables that take its row, then the ``on_end``
#: methods of the others (else ``None``); last, the :data:`Filing` of the processor that
#: files spans in place (else ``None``), whose ``on_start`` is then not among the first.
Route = tuple[
    tuple[Callable[..., object], ...],
    tuple[Callable[[Any], object], ...],
    "tuple[tuple[Callable[[Any], object], ...], tuple[tuple[Callable[[Any], object], bool], ...]] | None",
    "tuple[tuple[Callable[[Row], object], ...], tuple[Callable[[Any], object], ...]] | None",
    "Filing | None",
]
#: A plain LeanSpan's fields, as it hands them to the processors that file rows (see
#: :class:`LeanSpan`): start, end, trace id, span id, parent span id (0: a root), name,
#: attributes (its plain dict).
Row = tuple[int, int, int, int, int, str, dict[str, Any]]


class SpanFiler(Protocol):
    """A processor that keeps the open spans by id and the ended ones' rows, and lets a
    LeanSpan's start and end do that filing in place (``lean_filing``, see :data:`Filing`).
    Its ``on_start`` and ``on_end`` stay what every other span goes through."""

    #: The length of the rows at which :meth:`_window_full` must be called.
    _full_at: int

    def on_start(self, span: Any, parent_context: Any = None) -> None: ...

    def on_end(self, span: Any) -> None: ...

    def _window_full(self) -> None: ...


#: What a :class:`SpanFiler`'s ``lean_filing(starter)`` hands the route, so a LeanSpan files
#: itself with no call into the processor: its dict of open spans (a span is set in it by
#: span id as it starts), its flat list of rows (a plain span's :data:`Row` is added to it as
#: it ends, then its id leaves the open spans, then the length is checked against
#: ``_full_at``), the processor, and the name it does more for (a step span's): a span of
#: that name starts through its ``on_start`` and is never plain, so it ends through its
#: ``on_end``, as does any span that is no longer plain when it ends. (That way is right for
#: any span: a name compared, not a set looked up, as most spans pass it.)
Filing = tuple[dict[int, Any], list[Any], SpanFiler, str]


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
        "_plain_shared",
        "_processor",
        "_resource",
        "_route",
        "_sampler",
        "_scope",
        "_seen",
        "_span_bits",
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
        self._ids = ids = tracer.id_generator
        # rlsight's own generator's bits, drawn here without its method call (0 -> the method).
        self._span_bits = ids._bits if type(ids) is SeedIndependentIdGenerator else None
        self._limits = tracer._span_limits
        self._processor = tracer.span_processor
        self._resource = tracer.resource
        self._scope = tracer._instrumentation_scope
        self._info = tracer.instrumentation_info
        self._sampler = tracer.sampler
        #: Shared attribute dicts (``start(shared=True)``) found plain, by id.
        self._plain_shared: dict[int, Mapping[str, Any]] = {}
        self._seen: object = _NOT_SEEN  # so the first start computes the route
        self._route: Route = ((), (), None, None, None)

    def start(self, name: str, attributes: Mapping[str, Any], start_time: int | None,
              shared: bool = False) -> LeanSpan | None:
        """A started SDK span, or ``None`` where the tracer must decide (see the module doc).

        ``attributes`` (cleaned by rlsight) may become the span's own dict, which nothing
        changes afterwards (a set attribute replaces it): it may be shared, never changed.
        ``shared``: ``attributes`` is a dict many spans share and nothing changes
        (:mod:`rlsight._stamps`): its values are looked at once, not on every span.
        """
        ids, bits = self._ids, self._span_bits
        current: Any = _VAR.get().get(_SPAN_KEY) if _VAR is not None else current_span()
        if type(current) is LeanSpan:
            # One of ours: valid and sampled by construction, its flags one of the two below
            # (what a child of it gets too), read without the SDK's properties.
            parent: Any = current._context
            trace_id, _, _, flags, trace_state, _ = parent
        else:
            parent = (current.get_span_context()
                      if current is not None and isinstance(current, Span) else None)
            if parent is None or not parent.is_valid:
                parent = None
                if bits is not None:  # the generator's own draw, without its method calls
                    trace_id = bits(128) or ids.generate_trace_id()
                    random_id = True  # its is_trace_id_random()
                else:
                    trace_id = ids.generate_trace_id()
                    random_id = ids.is_trace_id_random()
                trace_state = _NO_TRACE_STATE
            else:
                parent_flags = parent.trace_flags
                if not parent_flags.sampled:
                    return None  # dropped by the sampler: the tracer returns its non-recording span
                trace_id = parent.trace_id
                random_id = parent_flags.random_trace_id
                trace_state = parent.trace_state
                if trace_state is None:
                    trace_state = _NO_TRACE_STATE
            flags = _SAMPLED_RANDOM if random_id else _SAMPLED
        # SpanContext(...) without its checks: both ids are valid (a valid parent's, or the
        # generator's, which never returns 0) and an absent trace state is the default one.
        span_id = (bits(64) if bits is not None else 0) or ids.generate_span_id()
        context = _new_tuple(SpanContext, (trace_id, span_id, False, flags, trace_state, True))
        limits = self._limits
        maxlen, max_text = limits.max_span_attributes, limits.max_span_attribute_length
        checked = self._plain_shared
        if trace_state is not _NO_TRACE_STATE and trace_state:
            plain = False  # a span with a trace state is never plain (see LeanSpan)
        elif shared and checked.get(id(attributes)) is attributes:
            plain = True  # looked at already, and nothing changes it
        else:
            plain = maxlen is None or len(attributes) <= maxlen
            if plain:
                for value in attributes.values():  # a loop: all() over a generator costs 2x
                    kind = type(value)
                    if kind is str:  # most values: only its length can matter
                        if max_text is not None and len(value) > max_text:
                            plain = False  # the SDK truncates it (and warns): its way
                            break
                    elif kind not in _PLAIN:
                        plain = False  # the SDK converts it (or drops it, and warns): its way
                        break
            if plain and shared:
                if len(checked) >= _PLAIN_SHARED_MAX:
                    checked.clear()
                checked[id(attributes)] = attributes  # held: its id names no other meanwhile
        try:
            processors = self._processor._span_processors
        except AttributeError:  # not the SDK's multi-processor: the one processor
            processors = None
        if processors is not self._seen:  # a tuple the SDK replaces when one is added
            self._route = _route(
                processors if isinstance(processors, tuple) else (self._processor,), self)
            self._seen = processors
        route = self._route
        span = _new_object(LeanSpan)
        span._starter = self
        if plain:  # already what the SDK's cleaning would keep; the caller hands the dict over
            span._attributes = attributes if type(attributes) is dict else dict(attributes)
        else:
            attrs = BoundedAttributes(maxlen, None, immutable=False, max_value_len=max_text)
            attrs._set_items(attributes)
            span._attributes = attrs
        # ReadableSpan's fields, then Span's: what _Span.__init__ sets for these arguments
        # (a LeanSpan has the ones every span shares on its class, see _SHARED, and reads the
        # ones every span of this starter shares from it, see _FROM_STARTER).
        span._name = name
        span._context = context
        span._parent = parent
        span._instrumentation_scope = self._scope
        span._resource = self._resource
        # LeanSpan.start's work, without its lock: nothing else can see the span yet.
        span._start_time = start_time if start_time is not None else _sdk.time_ns()  # type: ignore[attr-defined]
        filing = route[4]
        if filing is not None:  # the filer's on_start, in place (see Filing)
            if name == filing[3]:  # one it does more for: never plain, so it ends via on_end
                span._bounded()
                filing[2].on_start(span, None)
            else:
                filing[0][span_id] = span
        starts = route[0]
        if starts:  # none under rlsight's own processors: no loop set up for none (~11 ns)
            for on_start in starts:
                on_start(span, None)  # positionally: the SDK's SpanProcessor.on_start(span, parent_context)
        return span


class LeanSpan(_Span):
    """An SDK span whose start and end go straight to rlsight's own processors.

    Only :class:`LeanStarter` makes these (``object.__new__``, fields set as ``_Span``'s
    constructor would). Differences from ``_Span``, none visible through the span API or in
    what processors and exporters read: ``_attributes`` is a plain dict while the span is
    *plain* (then the SDK's ``BoundedAttributes``, which cleans a new value as usual);
    ``_events``/``_links`` are an empty tuple until the first one is added; its ``_lock`` is
    made on first use (an end without one is guarded by a module lock); the fields every
    span of its starter shares are read from ``_starter``; :meth:`start` and :meth:`end` call
    the starter's route (rlsight's processors) with the span itself (a plain span's end, with
    its :data:`Row` where a processor takes rows).

    Plain: its attributes were scalars within the limits, its context carries no trace state,
    its name is none its starter's filer does more for (:data:`Filing`), and nothing was set
    on it since (no attribute, status, event or link: the first such
    call ends it). Its kind is INTERNAL (always), its status UNSET, it has no events, links
    or dropped attributes, and its resource and scope are its starter's: a processor that
    finds a plain dict in ``_attributes`` of an ended LeanSpan may rely on all of that.
    """

    _events: Any
    _links: Any
    _starter: LeanStarter
    _own_lock: threading.Lock | None

    def _bounded(self) -> None:
        """Turn the attributes into the SDK's ``BoundedAttributes`` before the first set (of
        an attribute, the status, an event or a link): the span is no longer plain."""
        attrs = self._attributes
        if type(attrs) is dict and self._end_time is None:  # an ended span keeps it
            limits = self._limits
            bounded = BoundedAttributes(limits.max_span_attributes, None, immutable=False,
                                        max_value_len=limits.max_span_attribute_length)
            bounded._dict.update(attrs)  # already clean: what the SDK would have kept
            self._attributes = bounded

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        with self._lock:
            self._bounded()
        super().set_attributes(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        with self._lock:
            self._bounded()
        super().set_attribute(key, value)

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        with self._lock:
            self._bounded()
        super().set_status(status, description)

    def _add_event(self, event: Any) -> None:
        with self._lock:
            if self._end_time is None:
                self._bounded()
                if self._events is _NO_ITEMS:
                    self._events = BoundedList(self._limits.max_events)
                self._events.append(event)
                return
        _sdk_log.warning("Tried calling %s on an ended span.", "_add_event")

    def _add_link(self, link: Any) -> None:
        with self._lock:
            if self._end_time is None:
                self._bounded()
                if self._links is _NO_ITEMS:
                    self._links = BoundedList(self._limits.max_links)
                self._links.append(link)
                return
        _sdk_log.warning("Tried calling %s on an ended span.", "_add_link")

    def start(self, start_time: int | None = None, parent_context: Any = None) -> None:
        with self._lock:
            if self._start_time is not None:
                _sdk_log.warning("Calling start() on a started span.")
                return
            self._start_time = start_time if start_time is not None else _sdk.time_ns()  # type: ignore[attr-defined]
        for on_start in self._starter._route[0]:
            on_start(self, parent_context)

    def end(self, end_time: int | None = None) -> None:
        # Under the span's own lock if anything made one (it may be setting an attribute
        # right now), else under _LOCKS, which the making of one needs: either way nothing
        # else touches the span's fields meanwhile. Not ``with``: its protocol costs twice
        # the lock, on every span's end.
        lock = _LOCKS
        lock.acquire()
        own = self._own_lock
        if own is not None:
            lock.release()
            lock = own
            lock.acquire()
        try:
            if self._start_time is None:
                raise RuntimeError("Calling end() on a not started span.")
            end = self._end_time
            ended = end is not None
            attrs: Any = self._attributes
            if not ended:
                end = self._end_time = (end_time if end_time is not None
                                        else _sdk.time_ns())  # type: ignore[attr-defined]
                if type(attrs) is not dict:
                    attrs._immutable = True
        finally:
            lock.release()
        if ended:
            _sdk_log.warning("Calling end() on an ended span.")
            return
        _, ends, mixed, plain, filing = self._starter._route
        if mixed is None:
            if plain is not None and type(attrs) is dict:
                # A plain span: its row, made once for every processor that files one (the
                # store queues it, the roll-up keeps it), so the span can go when its block
                # ends. Ended, nothing can change the fields it holds.
                context: Any = self._context
                parent = self._parent
                sid = context[1]
                row: Any = (self._start_time, end, context[0], sid,
                            0 if parent is None else parent[1], self._name, attrs)
                if filing is not None:  # the filer's _file, in place (see Filing)
                    opened, rows, filer, _ = filing
                    rows += row  # one atomic step under the GIL: the rows stay whole
                    # Filed before it leaves the open spans (a roll-up reads the open spans,
                    # then the rows: it sees it in either or both). Missing only if it started
                    # before the filer was added.
                    try:  # noqa: SIM105
                        del opened[sid]
                    except KeyError:
                        pass
                    if len(rows) >= filer._full_at:
                        filer._window_full()
                takes_rows, takes_spans = plain
                if takes_rows:  # none with the local store off: no loop set up for none
                    for on_row in takes_rows:
                        on_row(row)
                if takes_spans:  # rarely any: no loop set up for none
                    for on_end in takes_spans:
                        on_end(self)
                return
            # The span itself, not a ReadableSpan copy: nothing can change it once ended.
            for on_end in ends:
                on_end(self)
            return
        endings, pairs = mixed
        for on_ending in endings:
            on_ending(self)
        readable = self._readable_span()  # one copy for every processor that is not ours
        for on_end, copy in pairs:
            on_end(readable if copy else self)


#: The fields every new span of rlsight's has the same value for; a LeanSpan reads them from
#: its class until a method sets its own (``set_status``, ``start``, ``end``...).
_SHARED: Final[dict[str, Any]] = {
    "_kind": _INTERNAL, "_start_time": None, "_end_time": None, "_status": _UNSET,
    "_trace_config": None, "_record_exception": True, "_set_status_on_exception": True,
    "_record_end_metrics": None, "_own_lock": None,
}
for _field, _value in {**_SHARED, "_events": _NO_ITEMS, "_links": _NO_ITEMS}.items():
    setattr(LeanSpan, _field, _value)

#: The fields every span of one starter has the same value for, read from the starter (each
#: is read rarely: by the SDK's span methods and the ``ReadableSpan`` copy for others'
#: processors; the encoders' ``_resource`` and ``_instrumentation_scope`` stay on the span).
_FROM_STARTER: Final = {"_instrumentation_info": "_info", "_sampler": "_sampler",
                        "_span_processor": "_processor", "_limits": "_limits"}
for _field, _name in _FROM_STARTER.items():
    setattr(LeanSpan, _field, property(operator.attrgetter("_starter." + _name)))


def _span_lock(span: LeanSpan) -> threading.Lock:
    """``span._lock``: made on first use (setting an attribute or an event, a status...),
    not for every span: most are only started and ended, and a lock each is one more object
    for the garbage collector to track while the store and the roll-up hold the span."""
    lock = span._own_lock
    if lock is None:
        with _LOCKS:
            lock = span._own_lock
            if lock is None:
                lock = span._own_lock = threading.Lock()
    return lock


LeanSpan._lock = property(_span_lock)  # type: ignore[assignment]


def _route(processors: Sequence[SpanProcessor], starter: LeanStarter) -> Route:
    """How the spans of ``starter`` reach ``processors``, in their order (see :data:`Route`).

    An own processor that defines ``lean_on_row(starter)`` may return a callable that takes
    a plain span's :data:`Row` in place of its ``on_end`` (``None`` keeps ``on_end``): the
    row is made once for all of them, and holds no span (see
    :class:`~rlsight._batching.BatchingSpanProcessor`). The first own processor whose
    ``lean_filing(starter)`` returns a :data:`Filing` (``rlsight._step_rollup``) is filed in
    place: its ``on_start`` only for spans of the name the filing gives, its ``on_end`` only
    for the spans that end with no row.
    """
    starts: list[Callable[..., object]] = []
    ends: list[tuple[Callable[[Any], object], bool]] = []
    endings: list[Callable[[Any], object]] = []
    takes_rows: list[Callable[[Row], object]] = []
    takes_spans: list[Callable[[Any], object]] = []
    filing: Filing | None = None
    for proc in processors:
        kind = type(proc)
        own = bool(getattr(kind, "reads_span_in_place", False))
        files: Filing | None = None
        if own and filing is None:
            lean_filing = getattr(proc, "lean_filing", None)
            files = filing = lean_filing(starter) if lean_filing is not None else None
        if not own:
            starts.append(_by_keyword(proc.on_start))
        elif files is None and kind.on_start is not SpanProcessor.on_start:  # skip a no-op
            starts.append(proc.on_start)
        if not own:
            endings.append(proc._on_ending)
            ends.append((proc.on_end, True))
        elif kind.on_end is not SpanProcessor.on_end:
            ends.append((proc.on_end, False))
            if files is not None:
                continue  # a plain span's end files it in place
            lean_on_row = getattr(proc, "lean_on_row", None)
            on_row = lean_on_row(starter) if lean_on_row is not None else None
            if on_row is not None:
                takes_rows.append(on_row)
            else:
                takes_spans.append(proc.on_end)
    if not endings:
        plain = (tuple(takes_rows), tuple(takes_spans)) if takes_rows or filing else None
        return tuple(starts), tuple(on_end for on_end, _ in ends), None, plain, filing
    return tuple(starts), (), (tuple(endings), tuple(ends)), None, filing


def _by_keyword(on_start: Callable[..., object]) -> Callable[[Any, Any], object]:
    """``on_start`` called as the SDK calls it (rlsight's own are called positionally)."""

    def call(span: Any, parent_context: Any) -> object:
        return on_start(span, parent_context=parent_context)

    return call

