"""The driver's live columns: each column is a C-level pass over one field; it must equal what a
plain per-span reading gives, whatever odd values the attributes hold."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanContext

from rlsight._lean import LeanStarter
from rlsight._step_rollup import live_spans
from rlsight.analysis.columns import BUCKET_CODES, NO_STEP
from rlsight.analysis.online import ROW_FIELDS, LiveSpans, live_columns

_ODD = st.sampled_from([None, True, False, 0, 1, 7, 2.0, "7", "productive", (1, 2)])
_BUCKET = st.one_of(st.sampled_from([*BUCKET_CODES, "busy", "Idle"]), _ODD)
_THREAD = st.one_of(st.integers(-(2**40), 2**40), _ODD)


def _attributes() -> st.SearchStrategy[dict[str, object]]:
    return st.fixed_dictionaries({}, optional={
        "rl.bucket": _BUCKET, "rl.concurrent": _ODD, "thread.id": _THREAD,
        "rl.step": st.one_of(st.integers(-(2**64), 2**64), _ODD)})


#: Trace ids: a few small ones (their high halves are equal), random 128-bit ones, and ones
#: that share a high half or a low half with another.
_TRACE = st.one_of(st.integers(1, 3), st.integers(1, 2**128 - 1),
                   st.sampled_from([5 << 64, (5 << 64) | 9, (7 << 64) | 9, 2**128 - 1]))
_span = st.tuples(_TRACE, st.integers(1, 2**64 - 1), st.one_of(st.none(), st.integers(1, 40)),
                  st.sampled_from(["rl.step", "rl.train.policy", "rl.rollout.generate"]),
                  st.integers(0, 10**6), st.one_of(st.none(), st.integers(0, 10**6)), _attributes())


def _field(spans: LiveSpans, name: str) -> list[object]:
    return spans.rows[ROW_FIELDS.index(name)::len(ROW_FIELDS)]


def _reference(spans: LiveSpans) -> dict[str, list[object]]:
    """Each column read one span at a time, by the rules the store reader applies."""
    span_names, attributes = _field(spans, "name"), _field(spans, "attributes")
    traces = sorted(set(_field(spans, "trace_id")))
    step = []
    for name, a in zip(span_names, attributes, strict=True):
        n = a.get("rl.step")
        ok = name == "rl.step" and type(n) is int and -(2**63) <= n < 2**63
        step.append(n if ok else NO_STEP)
    return {
        "start": _field(spans, "start"),
        "end": [spans.now if e is None else e for e in _field(spans, "end")],
        "trace": [traces.index(t) for t in _field(spans, "trace_id")],
        "span_id": _field(spans, "span_id"),
        "parent_id": _field(spans, "parent_id"),
        "bucket": [BUCKET_CODES.get(a.get("rl.bucket"), -1) for a in attributes],
        "concurrent": [a.get("rl.concurrent") is True for a in attributes],
        "thread": [t if type(t) is int else 0 for t in (a.get("thread.id") for a in attributes)],
        "step_no": step,
    }


@settings(max_examples=150, deadline=None)
@given(st.lists(_span, max_size=12))
def test_live_columns_equal_a_per_span_reading(rows):
    """bools are not thread ids, ``1`` is not ``rl.concurrent``, open spans end now, traces
    are numbered in the order of their ids."""
    flat = [x for trace, sid, parent, name, start, end, attrs in rows
            for x in (start, end, trace, sid, parent or 0, name, attrs)]
    spans = LiveSpans(flat, now=10**7, resource={})
    cols = live_columns(spans)
    for field, want in _reference(spans).items():
        assert getattr(cols, field).tolist() == want, field
    # Names are numbered in no particular order: each number names its span's name, once.
    assert [cols.names[i] for i in cols.name.tolist()] == _field(spans, "name")
    assert sorted(cols.names) == sorted(set(_field(spans, "name")))
    # The trace texts are order keys (the rollup reads only their order): one per trace, sorted.
    traces = set(_field(spans, "trace_id"))
    assert len(cols.traces) == len(traces) and cols.traces == sorted(cols.traces)
    assert len({len(getattr(cols, f)) for f in ("group", "process", "status", "source_file")}) == 1


@settings(max_examples=100, deadline=None)
@given(st.lists(_span, max_size=12), st.integers(0, 3), st.integers(0, 3), st.data())
def test_rows_in_place_in_a_longer_list_are_read_as_their_copy(rows, before, after, data):
    """The driver's roll-up hands over the processor's list (its rows from ``first`` to
    ``stop``, then the open spans' rows in ``more``): the columns of the copy."""
    flat = [x for trace, sid, parent, name, start, end, attrs in rows
            for x in (start, end, trace, sid, parent or 0, name, attrs)]
    split = 7 * data.draw(st.integers(0, len(rows)))
    other = [0, None, 9, 9, 0, "rl.other", {"rl.bucket": "idle", "thread.id": 3}]
    in_place = [*other * before, *flat[:split], *other * after]
    spans = LiveSpans(in_place, 10**7, {}, 7 * before, 7 * before + split, flat[split:])
    assert len(spans) == len(rows)
    got, want = live_columns(spans), live_columns(LiveSpans(flat, 10**7, {}))
    for field in ("start", "end", "trace", "span_id", "parent_id", "name", "bucket", "concurrent",
                  "thread", "step_no"):
        assert getattr(got, field).tolist() == getattr(want, field).tolist(), field
    assert got.names == want.names and got.traces == want.traces


def test_spans_with_plain_and_bounded_attributes_are_read_alike():
    """A LeanSpan keeps a plain dict, an SDK span the SDK's BoundedAttributes: the row holds
    a dict either way (the SDK's own, no copy: one other mapping among a step's rows sent
    every column down the slow path), and an attribute set on a LeanSpan after it started
    is read too."""
    provider = TracerProvider(shutdown_on_exit=False)
    lean = LeanStarter(provider.get_tracer("t"))
    plain = lean.start("a", {"rl.bucket": "idle", "thread.id": 5}, None)
    changed = lean.start("b", {"rl.bucket": "idle"}, None)
    assert plain is not None and changed is not None
    changed.set_attribute("thread.id", 9)
    sdk = provider.get_tracer("t").start_span("c", attributes={"rl.bucket": "productive", "thread.id": 3})
    for s in (plain, changed, sdk):
        s.end()
    spans = live_spans([plain, changed, sdk], 0, {})
    assert [type(a).__name__ for a in _field(spans, "attributes")] == ["dict"] * 3
    assert _field(spans, "attributes")[2] is sdk._attributes._dict  # type: ignore[attr-defined]
    cols = live_columns(spans)
    assert cols.thread.tolist() == [5, 9, 3]
    assert cols.bucket.tolist() == [BUCKET_CODES["idle"], BUCKET_CODES["idle"], BUCKET_CODES["productive"]]
    assert np.array_equal(cols.end >= cols.start, [True] * 3)


def test_attributes_stored_as_another_mapping_are_read_as_a_dict():
    # A span type that keeps its attributes in some other mapping (here a read-only proxy)
    # is read through a dict copy: the columns' C-level passes take only dicts.
    from types import MappingProxyType

    from opentelemetry.sdk.trace import ReadableSpan

    span = ReadableSpan(name="rl.rollout.generate", context=SpanContext(1, 2, False),
                        start_time=1, end_time=2)
    span._attributes = MappingProxyType({"rl.bucket": "productive", "thread.id": 7})
    cols = live_columns(live_spans([span], 5, {}))
    assert cols.bucket.tolist() == [BUCKET_CODES["productive"]]
    assert cols.thread.tolist() == [7]


def test_trace_ids_beyond_128_bits_are_numbered_by_their_text():
    # No SDK makes them, but a span may carry one: the table orders traces by their hex text,
    # which for such ids is not the order of the numbers.
    ids = [2**128 + 1, 3, -1, 3]
    spans = LiveSpans([x for i, t in enumerate(ids) for x in (0, 1, t, i + 1, 0, "a", {})],
                      now=1, resource={})
    text = [format(t, "032x") for t in ids]
    assert live_columns(spans).trace.tolist() == [sorted(set(text)).index(t) for t in text]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([5, 5.0, 1, True, 0, False, 7, None, "5", 2**40]), min_size=1,
                max_size=8))
@example([5, 5.0]).via("an equal float")
@example([1, True]).via("an equal bool")
@example([0, False, 0]).via("an equal bool")
def test_one_thread_id_repeated_is_read_as_ints_only(threads):
    """Spans of one thread share its id; an equal float or bool among them is not an id."""
    spans = LiveSpans([x for i, t in enumerate(threads)
                       for x in (0, 1, 1, i + 1, 0, "a", {"thread.id": t})], now=1, resource={})
    assert live_columns(spans).thread.tolist() == _reference(spans)["thread"]


def test_more_than_256_span_names_are_numbered_alike():
    names = [f"name.{i % 300}" for i in range(600)]
    spans = LiveSpans([x for i, name in enumerate(names) for x in (0, 1, 1, i + 1, 0, name, {})],
                      now=1, resource={})
    cols = live_columns(spans)
    assert [cols.names[i] for i in cols.name.tolist()] == names
    assert sorted(cols.names) == sorted(set(names))
