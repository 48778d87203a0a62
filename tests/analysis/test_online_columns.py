"""The driver's live columns: each column is a C-level pass over one field; it must equal what a
plain per-span reading gives, whatever odd values the attributes hold."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanContext

from rlsight._lean import LeanStarter
from rlsight._step_rollup import live_spans
from rlsight.analysis.columns import BUCKET_CODES, NO_STEP
from rlsight.analysis.online import LiveSpans, live_columns

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


def _reference(spans: LiveSpans) -> dict[str, list[object]]:
    """Each column read one span at a time, by the rules the store reader applies."""
    names = list(dict.fromkeys(spans.names))
    traces = sorted({c[0] for c in spans.contexts})
    step = []
    for name, a in zip(spans.names, spans.attributes, strict=True):
        n = a.get("rl.step")
        ok = name == "rl.step" and type(n) is int and -(2**63) <= n < 2**63
        step.append(n if ok else NO_STEP)
    return {
        "start": list(spans.starts),
        "end": [spans.now if e is None else e for e in spans.ends],
        "trace": [traces.index(c[0]) for c in spans.contexts],
        "span_id": [c[1] for c in spans.contexts],
        "parent_id": [0 if p is None else p[1] for p in spans.parents],
        "name": [names.index(n) for n in spans.names],
        "bucket": [BUCKET_CODES.get(a.get("rl.bucket"), -1) for a in spans.attributes],
        "concurrent": [a.get("rl.concurrent") is True for a in spans.attributes],
        "thread": [t if type(t) is int else 0 for t in (a.get("thread.id") for a in spans.attributes)],
        "step_no": step,
    }


@settings(max_examples=150, deadline=None)
@given(st.lists(_span, max_size=12))
def test_live_columns_equal_a_per_span_reading(rows):
    """bools are not thread ids, ``1`` is not ``rl.concurrent``, open spans end now, traces
    are numbered in the order of their ids."""
    spans = LiveSpans(
        contexts=[SpanContext(trace, sid, False) for trace, sid, *_ in rows],
        parents=[None if p is None else SpanContext(1, p, False) for _, _, p, *_ in rows],
        names=[r[3] for r in rows], starts=[r[4] for r in rows], ends=[r[5] for r in rows],
        attributes=[r[6] for r in rows], now=10**7, resource={})
    cols = live_columns(spans)
    for field, want in _reference(spans).items():
        assert getattr(cols, field).tolist() == want, field
    assert cols.names == list(dict.fromkeys(spans.names))
    # The trace texts are order keys (the rollup reads only their order): one per trace, sorted.
    assert len(cols.traces) == len({c[0] for c in spans.contexts}) and cols.traces == sorted(cols.traces)
    assert len({len(getattr(cols, f)) for f in ("group", "process", "status", "source_file")}) == 1


def test_spans_with_plain_and_bounded_attributes_are_read_alike():
    """A LeanSpan keeps a plain dict, an SDK span the SDK's BoundedAttributes: both are read
    as dicts, and an attribute set on a LeanSpan after it started is read too."""
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
    assert all(isinstance(a, dict) for a in spans.attributes)
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
    spans = LiveSpans(
        contexts=[SpanContext(t, i + 1, False) for i, t in enumerate(ids)], parents=[None] * 4,
        names=["a"] * 4, starts=[0] * 4, ends=[1] * 4, attributes=[{}] * 4, now=1, resource={})
    text = [format(t, "032x") for t in ids]
    assert live_columns(spans).trace.tolist() == [sorted(set(text)).index(t) for t in text]
