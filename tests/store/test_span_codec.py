"""The store's span codec writes byte for byte what serialising each span's mapping writes.

The reference here is the encoder the store used before the codec (issue #16): each span's
OTLP/JSON mapping built from the public ``ReadableSpan`` API, the request serialised whole.
It is restated in this file, apart from the code under test, and compared on any mix of span
types (SDK spans, LeanSpans, hand-made ReadableSpans, a subclass that overrides a property),
attributes (unicode text, big ints, NaN and infinities, arrays, values equal across types),
events, links, status, trace state, kinds, parents, resources and scopes, with both
serialisers (orjson and the standard library) and with spans prepared on app threads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from rlsight._batching import BatchingSpanProcessor
from rlsight._lean import LeanSpan, LeanStarter
from rlsight._stamps import stamps
from rlsight.store._span_codec import (
    _CACHE_MAX,
    SpanCodec,
    StoreRows,
    encode_spans,
    prepare_span,
)

Dumps = Callable[[object], bytes]


def _stdlib(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


# -- the reference: mappings from the public API, serialised whole ----------------------------

def _double(v: float) -> float | str:
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def _any(v: object) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)} if -(2**63) <= v < 2**63 else {"stringValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": _double(v)}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, Sequence):
        return {"arrayValue": {"values": [_any(x) for x in v]}}
    return {"stringValue": str(v)}


def _kvs(attrs: Mapping[str, object] | None) -> list[dict[str, Any]]:
    return [{"key": k, "value": _any(v)} for k, v in (attrs or {}).items()]


def _mapping(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.context
    assert ctx is not None
    start = span.start_time or 0
    out: dict[str, Any] = {
        "traceId": format(ctx.trace_id, "032x"), "spanId": format(ctx.span_id, "016x"),
        "name": span.name, "kind": span.kind.value + 1, "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(span.end_time or start), "attributes": _kvs(span.attributes),
    }
    if span.parent is not None:
        out["parentSpanId"] = format(span.parent.span_id, "016x")
    if ctx.trace_state:
        out["traceState"] = ctx.trace_state.to_header()
    if span.events:
        out["events"] = [{"timeUnixNano": str(e.timestamp), "name": e.name,
                          "attributes": _kvs(e.attributes)} for e in span.events]
    if span.links:
        out["links"] = [{"traceId": format(link.context.trace_id, "032x"),
                         "spanId": format(link.context.span_id, "016x"),
                         "attributes": _kvs(link.attributes)} for link in span.links]
    if span.status.status_code.value:
        out["status"] = {"code": span.status.status_code.value,
                         "message": span.status.description or ""}
    if span.dropped_attributes:
        out["droppedAttributesCount"] = span.dropped_attributes
    return out


def _reference(spans: Sequence[ReadableSpan], dumps: Dumps) -> bytes:
    groups: dict[int, tuple[Resource, dict[tuple[str, str], list[dict[str, Any]]]]] = {}
    for span in spans:
        scope = span.instrumentation_scope
        key = (scope.name, scope.version or "") if scope is not None else ("", "")
        groups.setdefault(id(span.resource), (span.resource, {}))[1].setdefault(key, []).append(
            _mapping(span))
    request = {"resourceSpans": [
        {"resource": {"attributes": _kvs(resource.attributes)},
         "scopeSpans": [{"scope": {"name": n, "version": v}, "spans": items}
                        for (n, v), items in scopes.items()]}
        for resource, scopes in groups.values()
    ]}
    return dumps(request) + b"\n"


# -- spans of every kind the store meets --------------------------------------------------------

class _RenamedSpan(ReadableSpan):
    """Overrides a property: the codec must read it through the properties."""

    @property
    def name(self) -> str:
        return "renamed:" + self._name


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalars = st.one_of(
    _text,
    st.integers(min_value=-(2**70), max_value=2**70),  # past int64 both ways
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from([0, 1, True, False, 0.0, -0.0, 1.0, "1", "", 2**63, -(2**63) - 1]),
)
_values = st.one_of(
    _scalars,
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=3).map(tuple),
    st.lists(_text, max_size=3).map(tuple),
    st.lists(st.floats(), max_size=3).map(tuple),
)
_keys = st.one_of(st.sampled_from(["rl.step", "rl.bucket", "k", "ключ", "é\n\"\\"]), _text)
_attrs = st.dictionaries(_keys, _values, max_size=6)
_ids = st.integers(min_value=1, max_value=2**64 - 1)
_times = st.integers(min_value=0, max_value=2**63 - 1)


@st.composite
def _span(draw: st.DrawFn, tracers: Sequence[sdk_trace.Tracer]) -> ReadableSpan:
    how = draw(st.sampled_from(["sdk", "lean", "readable", "renamed"]))
    name = draw(st.one_of(st.sampled_from(["rl.rollout.generate", "шаг"]), _text))
    tracer = draw(st.sampled_from(tracers))
    start = draw(_times)
    end = draw(st.one_of(st.none(), st.integers(min_value=start, max_value=2**63 - 1)))
    # Half the LeanSpans stay plain (scalars only, nothing set later): the store queues those
    # of the starter it adopts as rows (rlsight._batching, StoreRows).
    plain = how == "lean" and draw(st.booleans())
    attrs = draw(st.dictionaries(_keys, _scalars, max_size=5) if plain else _attrs)
    parent = None
    if draw(st.booleans()):
        state = TraceState([("vendor", "v1")]) if draw(st.booleans()) else None
        # From small pools too, so spans of one batch share traces under different parents.
        parent = SpanContext(draw(st.one_of(st.sampled_from([7, 2**127]), st.integers(1, 2**128 - 1))),
                             draw(st.one_of(st.sampled_from([1, 2, 2**63]), _ids)), is_remote=True,
                             trace_flags=TraceFlags(TraceFlags.SAMPLED), trace_state=state)
    links = [Link(SpanContext(draw(st.integers(1, 2**128 - 1)), draw(_ids), False), draw(_attrs))
             for _ in range(0 if plain else draw(st.integers(0, 2)))]
    events = [(draw(_text), draw(_attrs), draw(_times))
              for _ in range(0 if plain else draw(st.integers(0, 2)))]
    status = None if plain else draw(st.sampled_from(
        [None, Status(StatusCode.OK), Status(StatusCode.ERROR, "bad: é"), Status(StatusCode.ERROR)]))
    later = {} if plain else draw(_attrs)
    if how in ("readable", "renamed"):
        context = SpanContext(draw(st.integers(1, 2**128 - 1)), draw(_ids), False,
                              trace_state=parent.trace_state if parent else None)
        kind = draw(st.sampled_from(list(SpanKind)))
        cls = ReadableSpan if how == "readable" else _RenamedSpan
        return cls(name=name, context=context, parent=parent, resource=tracer.resource,
                   attributes={**attrs, **later}, events=[
                       sdk_trace.Event(n, a, t) for n, a, t in events], links=links,
                   kind=kind, status=status or Status(StatusCode.UNSET), start_time=start,
                   end_time=end, instrumentation_scope=tracer._instrumentation_scope)
    from opentelemetry import trace

    ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent else None
    if how == "lean":
        token = None
        if ctx is not None:
            from opentelemetry import context as otel_context

            token = otel_context.attach(ctx)
        # Some share a stamp dict (rlsight._stamps), which the codec encodes once and reuses.
        shared = plain and draw(st.booleans())
        given = stamps(("codec-test", repr(list(attrs.items()))), attrs) if shared else dict(attrs)
        try:
            span = _starter(tracer).start(name, given, start, shared)
        finally:
            if token is not None:
                otel_context.detach(token)
        assert span is not None
        for link in links:
            span.add_link(link.context, link.attributes)
    else:
        span = tracer.start_span(name, context=ctx, kind=draw(st.sampled_from(list(SpanKind))),
                                 attributes=attrs, links=links, start_time=start)
    for n, a, t in events:
        span.add_event(n, a, t)
    if later:
        span.set_attributes(later)
    if status is not None:
        span.set_status(status)
    span.end(end)
    return span


def _tracers() -> list[sdk_trace.Tracer]:
    out = []
    for r in range(2):
        provider = sdk_trace.TracerProvider(
            resource=Resource.create({"r": r, "service.name": "тест"}),
            span_limits=SpanLimits(max_span_attributes=5), shutdown_on_exit=False)
        out += [provider.get_tracer("rlsight", "0.1"), provider.get_tracer("user.code")]
    return out


_TRACERS = _tracers()
#: One starter per tracer, as a provider has: the store takes one starter's spans as rows.
_STARTERS: dict[int, LeanStarter] = {}


def _starter(tracer: sdk_trace.Tracer) -> LeanStarter:
    starter = _STARTERS.get(id(tracer))
    if starter is None:
        starter = _STARTERS[id(tracer)] = LeanStarter(tracer)
    return starter


def _queued(spans: Sequence[ReadableSpan], rows: StoreRows) -> list[Any]:
    """What a store processor taking ``rows`` queues for ``spans``: a row for each plain
    span of the starter it adopts (the first one offered; made as ``LeanSpan.end`` makes it,
    see ``rlsight._lean.Row``), the span itself for any other."""
    proc = BatchingSpanProcessor(lambda batch: True, name="t", interval_s=60,
                                 takes_rows=rows.adopt)
    try:
        for span in spans:
            on_row = proc.lean_on_row(span._starter) if type(span) is LeanSpan else None
            attrs = span._attributes
            if on_row is not None and type(attrs) is dict:
                context, parent = span._context, span._parent
                on_row((span._start_time, span._end_time, context[0], context[1],
                        0 if parent is None else parent[1], span._name, attrs))
            else:
                proc.on_end(span)
        return list(proc._queue)
    finally:
        proc._queue.clear()
        proc.shutdown()


class TestSameBytesAsTheMappings:
    @given(spans=st.lists(_span(_TRACERS), min_size=1, max_size=6))
    @settings(max_examples=150, deadline=None)
    def test_any_spans_encode_as_their_serialised_mappings(self, spans: list[ReadableSpan]) -> None:
        assert encode_spans(spans) == _reference(spans, orjson.dumps)
        assert SpanCodec(_stdlib).encode(spans) == _reference(spans, _stdlib)

    @given(spans=st.lists(_span(_TRACERS), min_size=1, max_size=6), data=st.data())
    @settings(max_examples=50, deadline=None)
    def test_spans_prepared_on_app_threads_encode_the_same(
        self, spans: list[ReadableSpan], data: st.DataObject
    ) -> None:
        mixed = [prepare_span(s) if data.draw(st.booleans()) else s for s in spans]
        assert encode_spans(mixed) == _reference(spans, orjson.dumps)

    @given(spans=st.lists(_span(_TRACERS), min_size=1, max_size=6), data=st.data())
    @settings(max_examples=150, deadline=None)
    def test_plain_lean_spans_queued_as_rows_encode_as_the_spans(
        self, spans: list[ReadableSpan], data: st.DataObject
    ) -> None:
        rows = StoreRows()
        queued = _queued(spans, rows)
        assert rows.encode(queued) == _reference(spans, orjson.dumps)
        assert SpanCodec(_stdlib).encode(queued, rows) == _reference(spans, _stdlib)
        mixed = [rows.prepare(item) if data.draw(st.booleans()) else item for item in queued]
        assert rows.encode(mixed) == _reference(spans, orjson.dumps)


def test_only_plain_spans_of_the_adopted_starter_are_queued_as_rows() -> None:
    """A row leaves out kind, status, trace state, events, links and the resource: only a
    span with none of its own goes as one; a set attribute, status, event or link, a trace
    state, or another starter's span keeps the span."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    tracer, other = _TRACERS[0], _TRACERS[2]
    starter = LeanStarter(tracer)
    made: list[ReadableSpan] = []

    def lean(name: str, change: Callable[[Any], object] = lambda s: None,
             by: LeanStarter = starter) -> None:
        span = by.start(name, {"k": 1}, 5)
        assert span is not None
        change(span)
        span.end(9)
        made.append(span)

    lean("plain")
    root = made[0]
    token = otel_context.attach(trace.set_span_in_context(root))
    try:
        lean("plain child")
    finally:
        otel_context.detach(token)
    lean("attribute", lambda s: s.set_attribute("k2", 2))
    lean("status", lambda s: s.set_status(Status(StatusCode.ERROR, "bad")))
    lean("event", lambda s: s.add_event("e"))
    lean("link", lambda s: s.add_link(SpanContext(3, 4, False)))
    lean("other starter", by=LeanStarter(other))
    parent = SpanContext(0xFEED, 0xBEEF, is_remote=True, trace_flags=TraceFlags(1),
                         trace_state=TraceState([("vendor", "v1")]))
    token = otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(parent)))
    try:
        lean("trace state")
    finally:
        otel_context.detach(token)
    rows = StoreRows()
    queued = _queued(made, rows)
    assert [type(item) is tuple for item in queued] == [True, True] + [False] * 6
    assert rows.encode(queued) == _reference(made, orjson.dumps)


def test_values_equal_across_types_keep_their_own_type_through_the_cache() -> None:
    """1 == True == 1.0 as dict keys; a cached KeyValue must never stand in for another type."""
    tracer = _TRACERS[0]
    spans = []
    for value in (True, 1, 1.0, -0.0, 0.0, False, 0, "1", 1, True):
        s = tracer.start_span("s", attributes={"k": value})
        s.end()
        spans.append(s)
    line = encode_spans(spans)
    assert line == _reference(spans, orjson.dumps)
    values = [sp["attributes"][0]["value"] for sp in
              json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]]
    assert values[:5] == [{"boolValue": True}, {"intValue": "1"}, {"doubleValue": 1.0},
                          {"doubleValue": -0.0}, {"doubleValue": 0.0}]


def test_an_empty_batch_is_an_empty_request() -> None:
    assert encode_spans([]) == b'{"resourceSpans":[]}\n'


def test_caches_stay_bounded_whatever_the_values() -> None:
    """Distinct values, names and traces on every span: no cache outgrows its bound."""
    codec = SpanCodec(orjson.dumps)
    tracer = _TRACERS[0]
    root = tracer.start_span("root")
    from opentelemetry import trace

    ctx = trace.set_span_in_context(root)
    spans = []
    for n in range(_CACHE_MAX + 500):
        s = tracer.start_span(f"name-{n}", context=ctx if n % 2 else None,
                              attributes={"n": n, "text": f"t{n}", "long": "x" * 300 + str(n)})
        s.end()
        spans.append(s)
    assert codec.encode(spans) == _reference(spans, orjson.dumps)
    caches = [codec._names, codec._trace_ids, codec._parents, codec._key_heads]
    assert all(0 < len(c) <= _CACHE_MAX for c in caches)
    assert 0 < sum(len(values) for values in codec._kvs.values()) <= _CACHE_MAX
    assert not any(len(str(v)) > 300 for values in codec._kvs.values() for v in values)  # never kept


def test_a_dict_spans_share_is_encoded_once_and_any_other_as_it_is_now() -> None:
    """rlsight's shared stamp dicts (never changed) are encoded once; any other plain dict
    is read afresh on every span, so a hand-made span's dict changed between two batches is
    written as it is at each."""
    codec = SpanCodec(orjson.dumps)
    shared = stamps(("codec-test",), {"rl.span_group": "generation", "thread.id": 5})
    own = {"k": 1}
    context = SpanContext(0xABC, 0x1, is_remote=False, trace_flags=TraceFlags(1))

    def made(attrs: dict[str, object]) -> ReadableSpan:
        return ReadableSpan("s", context=context, attributes=attrs, start_time=1, end_time=2)

    for value in (1, True, "two"):
        own["k"] = value
        batch = [made(shared), made(own), made(shared)]
        assert codec.encode(batch) == _reference(batch, orjson.dumps)
    assert [entry[0] for entry in codec._shared.values()] == [shared]
