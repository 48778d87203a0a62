"""Spans to store lines, written from text pieces instead of one mapping per span.

The store's writer thread encodes every span of the process, against every app thread
together, and its CPU counts in what a span costs the process (issue #16). Building the
OTLP/JSON mapping of each span (:func:`~rlsight.store._otlp_json.sdk_span_mapping`) and
serialising it cost ~3.5 µs a span, mostly in building dicts and formatting ids; here a span
is one f-string of what changes (ids, times) around cached pieces for what repeats (the name,
a trace id, a parent, each attribute's ``KeyValue``), and a request is one ``join``.

Every piece comes from the store's serialiser (:func:`~rlsight.store._otlp_json.serializer`,
orjson or the standard library), which writes a part alone as it writes it inside the whole
request, so a line is byte-for-byte what serialising the mappings gives (a property test
compares the two on any attributes, events, links, status and text).
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import SpanKind
from opentelemetry.trace.span import DEFAULT_TRACE_STATE
from opentelemetry.trace.status import StatusCode

from rlsight import _stamps
from rlsight.store._otlp_json import (
    _INT64_MAX,
    _INT64_MIN,
    _double,
    add_events_and_links,
    any_value,
    resource_mapping,
    row_mapping,
    sdk_span_mapping,
    serializer,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["PreparedSpan", "Row", "SpanCodec", "StoreRows", "encode_spans", "prepare_span"]

#: Takes one piece of a request.
Append = Callable[[str], object]

#: Longest attribute text whose encoded ``KeyValue`` is cached: short values (groups, buckets,
#: model names) repeat on every span; a long one (a prompt) would only pin memory.
_CACHED_TEXT_MAX: Final = 256
#: Entries per cache; a full cache is cleared, so memory stays bounded whatever the values.
_CACHE_MAX: Final = 4096
#: The ``ReadableSpan`` properties a line is made of: a span type that overrides none of them
#: holds what they return in the SDK's fields, and is read from those.
_READ_PROPERTIES: Final = (
    "name", "context", "kind", "parent", "start_time", "end_time", "status", "attributes",
    "events", "links", "resource", "instrumentation_scope", "dropped_attributes",
)
#: A span attribute's type, its ``KeyValue`` alone and after a comma.
_Encoded = tuple[type, str, str]
_NO_VALUES: Final[dict[object, _Encoded]] = {}
_INTERNAL: Final = SpanKind.INTERNAL
_UNSET: Final = StatusCode.UNSET


#: A plain LeanSpan's fields, as the store queues them (``rlsight._batching``): start, end,
#: trace id, span id, parent span id (0: a root), name, attributes (a plain dict).
Row = tuple[int, int, int, int, int, str, dict[str, Any]]
#: What a store batch holds: spans, rows of :class:`StoreRows`' starter, prepared spans.
Item = Any


def _scope_key(scope: Any) -> tuple[str, str]:
    return (scope.name, scope.version or "") if scope is not None else ("", "")


class PreparedSpan:
    """A span already encoded (its JSON object and a comma), with what grouping needs.

    The store writer is one thread against every app thread of the process; when it falls
    behind, app threads prepare their own spans (:func:`prepare_span`) and the writer is
    left with the cheap part, joining and writing.
    """

    __slots__ = ("end_time", "resource", "scope", "text")

    def __init__(self, end_time: int | None, resource: Resource, scope: tuple[str, str],
                 text: str) -> None:
        self.end_time = end_time
        self.resource = resource
        self.scope = scope
        self.text = text


def prepare_span(span: ReadableSpan) -> PreparedSpan:
    """``span`` encoded now, on the calling thread (see :class:`PreparedSpan`)."""
    parts: list[str] = []
    _codec().add_span(span, parts.append)
    return PreparedSpan(span.end_time, span.resource, _scope_key(span.instrumentation_scope),
                        "".join(parts))


class StoreRows:
    """The one ``LeanStarter`` (``rlsight._lean``) whose plain spans a store queues as rows.

    A row holds a span's fields, not the span, so the span and its context are freed when
    its block ends instead of staying alive (and walked by every garbage collection) until
    the writer runs. What a row does not hold is what every plain span of one starter shares
    (kind INTERNAL, status UNSET, no trace state, events or links, the starter's resource and
    scope); this keeps the resource and scope, so a row is encoded byte for byte as its span
    would be. The first starter offered is adopted; the spans of any other keep going as spans.
    """

    __slots__ = ("_lock", "_starter", "resource", "scope")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starter: object = None
        self.resource: Resource | None = None
        self.scope: tuple[str, str] = ("", "")

    def adopt(self, starter: Any) -> bool:
        """Whether rows of ``starter``'s spans are encoded here (the first one offered)."""
        with self._lock:
            if self._starter is None:
                self.resource, self.scope = starter._resource, _scope_key(starter._scope)
                self._starter = starter
            return self._starter is starter

    def prepare(self, item: Item) -> PreparedSpan:
        """A span or a row encoded now, on the calling thread (see :class:`PreparedSpan`)."""
        if type(item) is not tuple:
            return prepare_span(item)
        assert self.resource is not None  # a row comes from the adopted starter
        parts: list[str] = []
        _codec().add_row(item, parts.append)
        return PreparedSpan(item[1], self.resource, self.scope, "".join(parts))

    def encode(self, items: Iterable[Item]) -> bytes:
        """:func:`encode_spans` for a batch that may hold rows of the adopted starter."""
        return _codec().encode(items, self)


def encode_spans(spans: Iterable[ReadableSpan | PreparedSpan]) -> bytes:
    """One ``ExportTraceServiceRequest`` as a JSON line (with the trailing newline)."""
    return _codec().encode(spans)


@functools.cache
def _codec() -> SpanCodec:
    """The process's codec: its caches hold pieces of the store's serialiser."""
    return SpanCodec(serializer())


class SpanCodec:
    """Writes spans as OTLP/JSON lines, exactly as ``serialize`` writes their mappings.

    Its caches are shared by the writer thread and app threads preparing spans (each get,
    set and clear is one atomic dict operation), and each is cleared when full.
    """

    def __init__(self, serialize: Callable[[object], bytes]) -> None:
        self._serialize = serialize
        #: attribute key -> value -> its encoded KeyValue (:data:`_Encoded`); a dict per key,
        #: so a lookup allocates no (key, value) tuple. ``_kv_count`` values in all.
        self._kvs: dict[str, dict[object, _Encoded]] = {}
        self._kv_count = 0
        self._key_heads: dict[tuple[str, str], str] = {}
        self._names: dict[str, str] = {}
        self._trace_ids: dict[int, str] = {}
        self._parents: dict[int, str] = {}
        self._resources: dict[int, tuple[Resource, str]] = {}
        self._scopes: dict[tuple[str, str], str] = {}
        self._by_fields: dict[type, bool] = {}
        #: id of a shared attribute dict (:mod:`rlsight._stamps`) -> it, its KeyValues' text.
        self._shared: dict[int, tuple[dict[str, Any], str]] = {}
        self._add_span, self._add_rows = self._span_adders()

    def add_span(self, span: ReadableSpan, append: Append) -> None:
        """Append ``span``'s JSON object and a comma to a request, in pieces."""
        self._add_span(span, append, self._reads_fields(type(span)))

    def add_row(self, row: Row, append: Append) -> None:
        """Append the JSON object (and a comma) of the plain span ``row`` holds (see
        :class:`StoreRows`): what :meth:`add_span` appends for that span."""
        self._add_rows((row,), append)

    def _text(self, obj: object) -> str:
        return self._serialize(obj).decode()

    def encode(self, spans: Iterable[Item], rows: StoreRows | None = None) -> bytes:
        """One ``ExportTraceServiceRequest`` line: spans grouped by resource, then scope,
        each in the order first seen. Rows (see :class:`StoreRows`) need ``rows``."""
        by_resource: dict[int, tuple[Resource, dict[tuple[str, str], list[str]]]] = {}
        # Spans of one batch nearly all share a resource and a scope: the group they go to
        # is looked up again only when either changes.
        last_resource: object = None
        last_scope: object = None
        last_kind: object = None
        by_fields = False
        parts: list[str] = []
        append: Append = parts.append
        add_span, add_rows = self._add_span, self._add_rows
        # Runs of rows (nearly every item of a busy store's batch) go to add_rows whole:
        # one call and one group look-up per run, not per row.
        for kind, run in itertools.groupby(spans, type):
            if kind is tuple:
                assert rows is not None, "a batch with rows is encoded with their StoreRows"
                resource, scope = rows.resource, rows.scope
                if resource is not last_resource or scope is not last_scope or not parts:
                    parts = self._group(by_resource, resource, scope)
                    append = parts.append
                    last_resource, last_scope = resource, scope
                add_rows(run, append)
                continue
            for span in run:
                if kind is PreparedSpan:
                    resource, scope = span.resource, span.scope
                else:
                    if kind is not last_kind:
                        last_kind, by_fields = kind, self._reads_fields(kind)
                    if by_fields:
                        resource, scope = span._resource, span._instrumentation_scope
                    else:
                        resource, scope = span.resource, span.instrumentation_scope
                if resource is not last_resource or scope is not last_scope or not parts:
                    parts = self._group(by_resource, resource, scope)
                    append = parts.append
                    last_resource, last_scope = resource, scope
                if kind is PreparedSpan:
                    append(span.text)
                else:
                    add_span(span, append, by_fields)
        if not by_resource:
            return b'{"resourceSpans":[]}\n'
        out = ['{"resourceSpans":[']
        for resource, scopes in by_resource.values():
            out.append(self._resource_head(resource))
            for key, parts in scopes.items():
                parts[-1] = parts[-1][:-1]  # each span ends with a comma; the last one's goes
                out.append(self._scope_head(key))
                out += parts
                out.append("]},")
            out[-1] = "]}]},"
        out[-1] = "]}]}]}\n"
        return "".join(out).encode()

    @staticmethod
    def _group(by_resource: dict[int, tuple[Any, dict[tuple[str, str], list[str]]]],
               resource: Any, scope: Any) -> list[str]:
        """The pieces of the request's group for ``resource`` and ``scope`` (made if new)."""
        key = scope if type(scope) is tuple else _scope_key(scope)
        entry = by_resource.get(id(resource))
        if entry is None:
            entry = by_resource[id(resource)] = (resource, {})
        return entry[1].setdefault(key, [])

    def _reads_fields(self, kind: type) -> bool:
        """Whether ``kind``'s properties are ``ReadableSpan``'s (then its fields say it all)."""
        from opentelemetry.sdk.trace import ReadableSpan

        ok = self._by_fields.get(kind)
        if ok is None:
            ok = self._by_fields[kind] = issubclass(kind, ReadableSpan) and all(
                getattr(kind, name) is getattr(ReadableSpan, name) for name in _READ_PROPERTIES)
        return ok

    def _resource_head(self, resource: Resource) -> str:
        cache = self._resources
        hit = cache.get(id(resource))
        if hit is None or hit[0] is not resource:
            if len(cache) >= 64:
                cache.clear()
            # Held with its text, so its id cannot name another resource meanwhile.
            text = '{"resource":' + self._text(resource_mapping(resource)) + ',"scopeSpans":['
            hit = cache[id(resource)] = (resource, text)
        return hit[1]

    def _scope_head(self, key: tuple[str, str]) -> str:
        head = self._scopes.get(key)
        if head is None:
            if len(self._scopes) >= _CACHE_MAX:
                self._scopes.clear()
            name, version = key
            head = self._scopes[key] = (
                '{"scope":' + self._text({"name": name, "version": version}) + ',"spans":[')
        return head

    def _span_adders(self) -> tuple[Callable[[ReadableSpan, Append, bool], None],
                                     Callable[[Iterable[Row], Append], None]]:
        """:meth:`add_span` (for a span type that does or does not read from its fields) and
        a run of :meth:`add_row`: closures, whose caches are locals (cheaper to reach than attributes)."""
        text = self._text
        names, trace_ids, parents, kvs = self._names, self._trace_ids, self._parents, self._kvs
        shared, stamped = self._shared, _stamps.BY_ID
        name_of, trace_id_of, parent_of, key_value = (
            self._name, self._trace_id, self._parent, self._key_value)
        # The UNSET status object spans share (the SDK's default argument, the LeanSpan
        # class's): once seen, one identity test instead of two property reads.
        unset_status: object = None

        def add_key_values(attrs: Any, items: Mapping[str, Any], append: Append) -> None:
            """Append the ``KeyValue``s of ``attrs`` (its plain mapping ``items``)."""
            registered = stamped.get(id(attrs)) if type(attrs) is dict else None
            # A shared dict's text is gathered to keep it; any other goes straight out.
            if registered is attrs:
                pieces: list[str] = []
                add: Append = pieces.append
            else:
                add = append
            which: Literal[1, 2] = 1  # hit[1]: the first KeyValue; hit[2]: the rest
            # Unpacked, so the items iterator reuses its tuple: no allocation per value.
            for key, value in items.items():
                try:
                    hit = (kvs.get(key) or _NO_VALUES).get(value)
                except TypeError:  # an unhashable value (a list in a hand-made span)
                    hit = None
                if hit is None or hit[0] is not type(value):  # 1 == True == 1.0
                    hit = key_value(key, value)
                add(hit[which])
                which = 2
            if registered is attrs:
                attrs_text = "".join(pieces)
                append(attrs_text)
                if len(shared) >= _CACHE_MAX:
                    shared.clear()
                # The entry holds the dict, so its id names no other meanwhile.
                shared[id(attrs)] = (registered, attrs_text)

        def add_span(span: ReadableSpan, append: Append, by_fields: bool) -> None:
            nonlocal unset_status
            ctx: Any = span._context
            start = span._start_time or 0
            end = span._end_time or start
            if not by_fields or type(start) is not int or type(end) is not int or ctx is None:
                append(text(sdk_span_mapping(span)) + ",")
                return
            # SpanContext is a tuple (trace id, span id, remote, flags, trace state, valid);
            # its properties are Python calls, indexing is not.
            trace_id, trace_state = ctx[0], ctx[4]
            parent = span._parent
            trace_hex = trace_ids.get(trace_id)
            try:  # to_bytes(...).hex() is format(id, "016x") at half the cost, for a valid id
                span_hex = ctx[1].to_bytes(8, "big").hex()
                if trace_hex is None:
                    # Only a child's is kept: a root's trace id is its own (its children,
                    # which end first, were encoded with it already).
                    trace_hex = (trace_id.to_bytes(16, "big").hex() if parent is None
                                 else trace_id_of(trace_id))
            except OverflowError:  # not an OTLP id (negative, too wide): format() writes it
                append(text(sdk_span_mapping(span)) + ",")
                return
            name = span._name
            encoded_name = names.get(name)
            if encoded_name is None:
                encoded_name = name_of(name)
            span_kind = span._kind
            append(
                f'{{"traceId":"{trace_hex}","spanId":"{span_hex}",'
                f'"name":{encoded_name},'
                f'"kind":{"1" if span_kind is _INTERNAL else span_kind.value + 1},'
                f'"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":['
            )
            attrs: Any = span._attributes
            plain = type(attrs) is dict  # a LeanSpan's, until an attribute is set on it
            # A dict many spans share (rlsight._stamps) is encoded once.
            memo = shared.get(id(attrs)) if plain else None
            if memo is not None and memo[0] is attrs:
                append(memo[1])
            elif attrs:
                add_key_values(attrs, attrs if plain else getattr(attrs, "_dict", attrs), append)
            # What is rare goes through the mapping: trace state, events, links, status, drops.
            status = span._status
            code = 0
            if status is not unset_status:
                status_code = status.status_code
                if status_code is _UNSET:
                    unset_status = status
                else:
                    code = status_code.value
            dropped = (0 if plain else attrs.dropped if type(attrs) is BoundedAttributes
                       else span.dropped_attributes)
            events, links = span._events, span._links
            if ((trace_state is DEFAULT_TRACE_STATE or not trace_state) and not events
                    and not links and not code and not dropped):
                if parent is None:
                    append("]},")
                else:
                    tail = parents.get(parent[1])
                    append(tail if tail is not None else parent_of(parent[1]))
                return
            rest: dict[str, Any] = {}
            if trace_state:
                rest["traceState"] = trace_state.to_header()
            add_events_and_links(rest, events, links)
            if code:
                rest["status"] = {"code": code, "message": status.description or ""}
            if dropped:
                rest["droppedAttributesCount"] = dropped
            head = "]," if parent is None else f'],"parentSpanId":"{parent[1]:016x}",'
            append(head + text(rest)[1:] + ",")

        def add_rows(rows: Iterable[Row], append: Append) -> None:
            # add_span's common case, for what a row leaves out (see StoreRows): one loop
            # for a run of rows, and one piece per row when its attributes are a shared dict.
            for row in rows:
                start, end, trace_id, span_id, parent_id, name, attrs = row
                start = start or 0
                end = end or start
                trace_hex = trace_ids.get(trace_id)
                try:
                    if type(start) is not int or type(end) is not int:
                        raise OverflowError  # written as str() writes it, through the mapping
                    span_hex = span_id.to_bytes(8, "big").hex()
                    if trace_hex is None:
                        trace_hex = (trace_id.to_bytes(16, "big").hex() if not parent_id
                                     else trace_id_of(trace_id))
                except OverflowError:
                    append(text(row_mapping(row)) + ",")
                    continue
                encoded_name = names.get(name)
                if encoded_name is None:
                    encoded_name = name_of(name)
                tail: str | None = "]}," if not parent_id else parents.get(parent_id)
                if tail is None:
                    tail = parent_of(parent_id)
                memo = shared.get(id(attrs))
                if memo is not None and memo[0] is attrs:
                    append(
                        f'{{"traceId":"{trace_hex}","spanId":"{span_hex}","name":{encoded_name},'
                        f'"kind":1,"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}",'
                        f'"attributes":[{memo[1]}{tail}'
                    )
                    continue
                append(
                    f'{{"traceId":"{trace_hex}","spanId":"{span_hex}","name":{encoded_name},'
                    f'"kind":1,"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}",'
                    '"attributes":['
                )
                if attrs:
                    add_key_values(attrs, attrs, append)
                append(tail)

        return add_span, add_rows

    def _name(self, name: str) -> str:
        if len(self._names) >= _CACHE_MAX:
            self._names.clear()
        encoded = self._names[name] = self._text(name)
        return encoded

    def _trace_id(self, trace_id: int) -> str:
        if len(self._trace_ids) >= _CACHE_MAX:
            self._trace_ids.clear()
        encoded = self._trace_ids[trace_id] = f"{trace_id:032x}"
        return encoded

    def _parent(self, span_id: int) -> str:
        if len(self._parents) >= _CACHE_MAX:
            self._parents.clear()
        tail = self._parents[span_id] = f'],"parentSpanId":"{span_id:016x}"}},'
        return tail

    def _key_value(self, key: str, value: object) -> _Encoded:
        """One attribute's ``KeyValue``, alone and after a comma; cached for short scalars."""
        kind = type(value)
        if kind is int and _INT64_MIN <= value <= _INT64_MAX:  # type: ignore[operator]
            encoded = f'{self._key_head(key, "intValue")}"{value}"}}}}'
        elif kind is float:
            encoded = self._key_head(key, "doubleValue") + self._text(_double(value)) + "}}"  # type: ignore[arg-type]
        else:
            encoded = self._text({"key": key, "value": any_value(value)})
        out = (kind, encoded, "," + encoded)
        if kind is bool or kind is int or (kind is str and len(value) <= _CACHED_TEXT_MAX):  # type: ignore[arg-type]
            self._kv_count += 1
            if self._kv_count > _CACHE_MAX:
                self._kvs.clear()
                self._kv_count = 1
            values = self._kvs.get(key)
            if values is None:
                values = self._kvs[key] = {}
            values[value] = out
        return out

    def _key_head(self, key: str, field: str) -> str:
        """``{"key":KEY,"value":{"FIELD":``, for a value written after it."""
        cache_key = (key, field)
        head = self._key_heads.get(cache_key)
        if head is None:
            if len(self._key_heads) >= _CACHE_MAX:
                self._key_heads.clear()
            head = self._key_heads[cache_key] = (
                '{"key":' + self._text(key) + ',"value":{' + self._text(field) + ":")
        return head
