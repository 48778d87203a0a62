"""The lean start of rlsight's own spans (rlsight._lean) writes exactly what the SDK path writes.

The same program runs twice through the real runtime and the real local store, once with the
lean starter and once through ``tracer.start_span``; with the ids and the clock made
deterministic, every stored span line of both runs must be byte-for-byte the same, foreign
spans (the user's own tracer) included.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, StatusCode, TraceFlags

import rlsight
from rlsight import RL, TelemetryConfig
from rlsight._lean import LeanSpan, LeanStarter
from rlsight.propagation import attach_trace_carrier
from rlsight.spans import record_span, span, step_span, umbrella_span


class _CountingIds(IdGenerator):
    """Ids from a counter: both runs draw the same sequence.

    Only the thread that builds it counts: a thread left running by an earlier test (a server, a
    watchdog) that starts a span meanwhile gets a random id instead of shifting the sequence.
    """

    def __init__(self) -> None:
        self._next = itertools.count(1)
        self._owner = threading.get_ident()
        self._other = RandomIdGenerator()

    def generate_span_id(self) -> int:
        if threading.get_ident() != self._owner:
            return self._other.generate_span_id()
        return 0x1000 + next(self._next)

    def generate_trace_id(self) -> int:
        if threading.get_ident() != self._owner:
            return self._other.generate_trace_id()
        return 0xABC000 + next(self._next)


def _test_thread_clock() -> Callable[[], int]:
    """A clock that ticks by 1 us per read on this thread and reads the real one elsewhere.

    Both runs must see the same sequence of times; under load, another thread reading the SDK's
    clock mid-run (a leftover from an earlier test) would otherwise take a tick from the count.
    """
    owner, clock, real = threading.get_ident(), itertools.count(1_700_000_000_000_000_000, 1_000), \
        sdk_trace.time_ns

    def time_ns() -> int:
        return next(clock) if threading.get_ident() == owner else real()
    return time_ns


def _program(user: trace.Tracer) -> None:
    """Spans of every shape the helpers make: nested, attributes, events, errors, parents."""
    with step_span(1):
        with umbrella_span(RL.ROLLOUT, "rl.rollout"):
            with span(RL.GENERATION, "rl.rollout.generate", batch_size=8, model="m", ratio=0.5,
                      greedy=True, lengths=[1, 2], prompt="secret words") as s:
                s.set_attribute("rl.extra", 3)
                s.add_event("chunk", {"tokens": 4})
                with user.start_as_current_span("user.inner", attributes={"k": "v"}):
                    with span(RL.REWARD, "rl.reward.compute") as r:
                        # Set on a span whose attributes were all plain: the SDK's cleaning
                        # applies to the new ones (a list, text over the limit).
                        r.set_attributes({"rl.list": [1, 2], "rl.long": "y" * 40_000})
                        r.set_attribute("rl.extra", 3)
            with pytest.raises(ValueError), span(RL.REWARD, "rl.reward.compute"):
                raise ValueError("bad reward")
        # Text over the store's length limit: the SDK truncates it, on either path.
        record_span(RL.TRAINING, "rl.train.step", 1.7e9, 1.7e9 + 1.5, loss=0.25, note="x" * 40_000)
    # A parent from another process (a carrier), sampled: the span joins its trace.
    with attach_trace_carrier({"traceparent": f"00-{0xFEED:032x}-{0xBEEF:016x}-01",
                               "tracestate": "vendor=1"}):
        with span(RL.GENERATION, "rl.remote.child"):
            pass
    # A parent that was not sampled: neither path records the span.
    unsampled = NonRecordingSpan(SpanContext(0xFEED, 0xBEEF, is_remote=True,
                                             trace_flags=TraceFlags(TraceFlags.DEFAULT)))
    with trace.use_span(unsampled), span(RL.GENERATION, "rl.never.recorded") as dropped:
        assert not dropped.is_recording()


def _stored_spans(run_dir: Path) -> list[str]:
    """Each stored span as the exact JSON it was written, with its resource and scope."""
    out = []
    for path in sorted((run_dir / "traces").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            for rs in json.loads(line)["resourceSpans"]:
                resource = json.dumps(rs["resource"], separators=(",", ":"))
                for ss in rs["scopeSpans"]:
                    scope = json.dumps(ss["scope"], separators=(",", ":"))
                    out += [resource + scope + json.dumps(sp, separators=(",", ":"))
                            for sp in ss["spans"]]
    return sorted(out)


def _deterministic_telemetry(run_dir: Path, run_id: str, monkeypatch: pytest.MonkeyPatch,
                             **config: Any) -> tuple[Any, Any, LeanStarter]:
    """Telemetry whose clock and ids repeat from run to run (so two runs of one program store
    the same lines): the runtime, its provider, and a lean starter on its tracer."""
    monkeypatch.setattr(sdk_trace, "time_ns", _test_thread_clock())
    tel = rlsight.setup_telemetry(TelemetryConfig(run_dir=str(run_dir), run_id=run_id,
                                                  span_groups=["all"], strict=True, **config))
    ids = _CountingIds()
    provider = tel._tracer_provider
    assert provider is not None
    provider.id_generator = ids
    tel.tracer.id_generator = ids  # type: ignore[attr-defined]
    starter = LeanStarter(tel.tracer)
    assert starter.usable, "the lean path must be on for rlsight's own provider"
    return tel, provider, starter


def _run(run_dir: Path, lean: bool, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    tel, provider, starter = _deterministic_telemetry(run_dir, "lean-test", monkeypatch)
    try:
        tel._lean = starter if lean else None
        _program(provider.get_tracer("user.code"))
    finally:
        rlsight.shutdown_telemetry()
    return _stored_spans(run_dir)


def test_lean_and_sdk_paths_store_the_same_lines(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    lean = _run(tmp_path / "lean", True, monkeypatch)
    sdk = _run(tmp_path / "sdk", False, monkeypatch)
    names = sorted(json.loads(line[line.index('{"traceId"'):])["name"] for line in sdk)
    assert names == sorted(["rl.step", "rl.rollout", "rl.rollout.generate", "user.inner",
                            "rl.reward.compute", "rl.reward.compute", "rl.train.step",
                            "rl.remote.child"])
    assert lean == sdk


def test_lean_span_reads_every_field_the_sdk_sets_with_the_same_value() -> None:
    provider = sdk_trace.TracerProvider(shutdown_on_exit=False)
    tracer = provider.get_tracer("t")
    sdk = tracer.start_span("x", attributes={"a": 1})
    starter = LeanStarter(tracer)
    assert starter.usable
    lean = starter.start("x", {"a": 1}, None)
    assert isinstance(lean, LeanSpan)
    # _record_end_metrics: the tracer's is a no-op function (its metrics are off, or the
    # lean path steps aside); the lean span has none to call.
    for field in set(vars(sdk)) - {"_context", "_lock", "_start_time", "_attributes",
                                   "_events", "_links", "_record_end_metrics"}:
        mine, theirs = getattr(lean, field), getattr(sdk, field)
        if field == "_status":  # Status has no __eq__
            mine, theirs = (mine.status_code, mine.description), (theirs.status_code, theirs.description)
        assert mine == theirs, field
    assert (lean.events, lean.links, lean.dropped_events, lean.dropped_links) == ((), (), 0, 0)
    assert dict(lean.attributes or {}) == dict(sdk.attributes or {}) == {"a": 1}
    assert lean.context.is_valid and lean.context.trace_flags == sdk.context.trace_flags
    assert lean.context.trace_state == sdk.context.trace_state
    lean.set_status(StatusCode.ERROR, "boom")  # its own field now, not the class's
    assert lean.status.status_code is StatusCode.ERROR
    assert LeanSpan._status.status_code is StatusCode.UNSET
    for s in (sdk, lean):
        s.end()
    assert lean.end_time is not None and not lean.is_recording()


def test_lean_path_steps_aside_for_a_non_default_sampler() -> None:
    from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

    provider = sdk_trace.TracerProvider(sampler=TraceIdRatioBased(0.5), shutdown_on_exit=False)
    assert not LeanStarter(provider.get_tracer("t")).usable


def _stored_by_name(run_dir: Path) -> dict[str, dict[str, object]]:
    return {json.loads(line[line.index('{"traceId"'):])["name"]: json.loads(line[line.index('{"traceId"'):])
            for line in _stored_spans(run_dir)}


def test_foreign_and_lean_spans_parent_each_other_and_carriers_name_the_lean_span(
        tmp_path: Path) -> None:
    """A user's span under an rlsight span, an rlsight span under it, a carrier made inside."""
    from opentelemetry.propagate import inject

    tel = rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=["all"]))
    try:
        assert tel._lean is not None
        provider = tel._tracer_provider
        assert provider is not None
        user = provider.get_tracer("user.code")
        with span(RL.GENERATION, "rl.outer") as outer:
            assert isinstance(outer, LeanSpan) and trace.get_current_span() is outer
            carrier: dict[str, str] = {}
            inject(carrier)
            with user.start_as_current_span("user.middle") as middle:
                assert not isinstance(middle, LeanSpan)
                with span(RL.REWARD, "rl.inner") as inner:
                    assert isinstance(inner, LeanSpan)
    finally:
        rlsight.shutdown_telemetry()
    stored = _stored_by_name(tmp_path)
    outer_id, middle_id = stored["rl.outer"]["spanId"], stored["user.middle"]["spanId"]
    assert stored["user.middle"]["parentSpanId"] == outer_id
    assert stored["rl.inner"]["parentSpanId"] == middle_id
    assert len({s["traceId"] for s in stored.values()}) == 1
    assert carrier["traceparent"] == f"00-{stored['rl.outer']['traceId']}-{outer_id}-03"


class _Recorder(SpanProcessor):
    """A processor the user added: it must see what the SDK would show it."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.ended: list[ReadableSpan] = []
        self.ending: list[str] = []

    def on_start(self, span: sdk_trace.Span, parent_context: object = None) -> None:
        self.started.append(span.name)
        span.set_attribute("user.tag", "on-start")  # processors may stamp attributes

    def _on_ending(self, span: sdk_trace.Span) -> None:
        self.ending.append(span.name)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


def test_a_processor_added_to_the_provider_later_sees_every_span_after_it(tmp_path: Path) -> None:
    tel = rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=["all"]))
    try:
        with span(RL.GENERATION, "rl.before"):
            pass
        recorder = _Recorder()
        provider = tel._tracer_provider
        assert provider is not None
        provider.add_span_processor(recorder)
        with span(RL.GENERATION, "rl.after", batch_size=4) as s:
            s.add_event("chunk", {"n": 1})
    finally:
        rlsight.shutdown_telemetry()
    assert recorder.started == recorder.ending == ["rl.after"]
    [ended] = recorder.ended
    # A ReadableSpan copy, as the SDK hands it over, with everything on it.
    assert type(ended) is ReadableSpan
    assert dict(ended.attributes or {})["user.tag"] == "on-start"
    assert dict(ended.attributes or {})["rl.batch_size"] == 4
    assert [e.name for e in ended.events] == ["chunk"] and ended.end_time is not None
    stored = _stored_by_name(tmp_path)
    assert set(stored) == {"rl.before", "rl.after"}
    assert {"key": "user.tag", "value": {"stringValue": "on-start"}} in stored["rl.after"]["attributes"]


def test_an_ended_lean_span_refuses_changes_as_an_sdk_span_does(caplog: pytest.LogCaptureFixture) -> None:
    provider = sdk_trace.TracerProvider(shutdown_on_exit=False)
    s = LeanStarter(provider.get_tracer("t")).start("x", {"a": 1}, None)
    assert s is not None
    s.end()
    s.set_attribute("late", 1)
    s.add_event("late")
    s.set_status(StatusCode.ERROR, "late")
    s.end()
    assert dict(s.attributes or {}) == {"a": 1} and s.events == ()
    assert s.status.status_code is StatusCode.UNSET
    assert [r.getMessage() for r in caplog.records] == [
        "Setting attribute on ended span.", "Tried calling _add_event on an ended span.",
        "Tried calling set_status on an ended span.", "Calling end() on an ended span."]


def test_repeated_attribute_values_encode_by_their_own_type() -> None:
    """The store's KeyValue cache never gives 1 for True, 0.0 for -0.0, or a stale value."""
    from rlsight.store._otlp_json import key_values

    seen = [key_values({"k": v}) for v in (True, 1, 1.0, -0.0, 0.0, "1", 1, True)]
    values = [json.dumps(kv[0]["value"]) for kv in seen]
    assert values == ['{"boolValue": true}', '{"intValue": "1"}', '{"doubleValue": 1.0}',
                      '{"doubleValue": -0.0}', '{"doubleValue": 0.0}', '{"stringValue": "1"}',
                      '{"intValue": "1"}', '{"boolValue": true}']


def test_a_batch_of_interleaved_resources_and_scopes_groups_each_span_once() -> None:
    """The store encoder groups by resource, then scope, in first-seen order, whatever the mix."""
    from opentelemetry.sdk.resources import Resource

    from rlsight.store._span_codec import encode_spans

    providers = [sdk_trace.TracerProvider(resource=Resource.create({"r": i}), shutdown_on_exit=False)
                 for i in range(2)]
    tracers = [(p, p.get_tracer(scope)) for p in providers for scope in ("a", "b")]
    order = [0, 1, 0, 2, 3, 2, 1, 0, 3]
    spans = []
    for n, i in enumerate(order):
        s = tracers[i][1].start_span(f"s{n}")
        s.end()
        spans.append(s)
    request = json.loads(encode_spans(spans))
    got = [(next(kv["value"]["intValue"] for kv in rs["resource"]["attributes"] if kv["key"] == "r"),
            ss["scope"]["name"],
            [sp["name"] for sp in ss["spans"]])
           for rs in request["resourceSpans"] for ss in rs["scopeSpans"]]
    assert got == [("0", "a", ["s0", "s2", "s7"]), ("0", "b", ["s1", "s6"]),
                   ("1", "a", ["s3", "s5"]), ("1", "b", ["s4", "s8"])]


def test_the_step_rollup_reads_lean_and_sdk_span_attributes_alike() -> None:
    """The step roll-up reads ``_attributes`` in one C-level call per span: a LeanSpan's plain
    dict (exactly ``dict``, before and after an attribute is set) or an SDK span's storage."""
    from rlsight._step_rollup import live_spans

    provider = sdk_trace.TracerProvider(shutdown_on_exit=False)
    tracer = provider.get_tracer("t")
    lean = LeanStarter(tracer).start("x", {"a": 1}, None)
    assert lean is not None and type(lean._attributes) is dict
    touched = LeanStarter(tracer).start("y", {"a": 1}, None)
    assert touched is not None
    touched.set_attribute("b", 2)  # now the SDK's BoundedAttributes, as an SDK span's
    sdk = tracer.start_span("z", attributes={"a": 1})
    for s in (lean, touched, sdk):
        s.end()
    got = live_spans([lean, touched, sdk], 0, {}).rows[6::7]
    assert [{k: a.get(k) for k in ("a", "b")} for a in got] == [
        {"a": 1, "b": None}, {"a": 1, "b": 2}, {"a": 1, "b": None}]


def test_a_tracer_with_a_single_processor_reaches_it() -> None:
    """A tracer whose span processor is one processor, not the SDK's multi-processor: the
    lean span's route is that processor (the first start computes it)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.sdk.trace.sampling import DEFAULT_ON
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    recorder = _Recorder()
    scope = InstrumentationScope("t")
    tracer = sdk_trace.Tracer(DEFAULT_ON, Resource.create({}), recorder,  # type: ignore[arg-type]
                              RandomIdGenerator(), scope, sdk_trace.SpanLimits(), scope)  # type: ignore[arg-type]
    starter = LeanStarter(tracer)
    assert starter.usable
    s = starter.start("x", {"a": 1}, None)
    assert s is not None
    s.end()
    assert recorder.started == recorder.ending == ["x"] and [e.name for e in recorder.ended] == ["x"]


def test_a_lean_span_ended_from_many_threads_at_once_ends_once_and_keeps_its_attributes() -> None:
    """A LeanSpan makes its lock on first use; ends racing each other, and with attribute
    sets on other threads, still give one end (processors see the span once) and either the
    attribute (set before the end) or the SDK's warning, never an exception."""
    import threading

    class Ends(SpanProcessor):
        def __init__(self) -> None:
            self.ended: list[str] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.ended.append(span.name)

    recorder = Ends()
    provider = sdk_trace.TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(recorder)
    starter = LeanStarter(provider.get_tracer("t"))
    errors: list[BaseException] = []
    for round_ in range(50):
        s = starter.start(f"s{round_}", {"a": 1}, None)
        assert s is not None and s._own_lock is None  # no lock until something needs one
        barrier = threading.Barrier(6)

        def end(span: LeanSpan = s, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            span.end()

        def touch(span: LeanSpan = s, barrier: threading.Barrier = barrier, n: int = 0) -> None:
            barrier.wait()
            try:
                span.set_attribute(f"k{n}", n)
                span.add_event("e")
            except BaseException as exc:  # the test reports any
                errors.append(exc)

        threads = [threading.Thread(target=end) for _ in range(3)]
        threads += [threading.Thread(target=touch, kwargs={"n": i}) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert recorder.ended == [f"s{i}" for i in range(50)]


def test_spans_with_only_rlsights_stamps_share_a_dict_that_a_set_attribute_never_changes(
        tmp_path: Path) -> None:
    """Spans of one site with no caller attribute share their stamps' dict (issue #16); one
    of them setting an attribute gets its own, and the others, shared dict included, keep
    theirs; the store writes each span's own attributes."""
    rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=["all"]))
    try:
        kept = []
        for n in range(3):
            with span(RL.GENERATION, "rl.rollout.generate") as s:
                if n == 1:
                    s.set_attribute("rl.extra", 7)
            kept.append(s)
        first, touched, last = kept
        assert first._attributes is last._attributes  # type: ignore[attr-defined]
        assert touched._attributes is not first._attributes  # type: ignore[attr-defined]
        stamps = {"rl.span_group": "generation", "thread.id": threading.get_native_id(),
                  "rl.bucket": "productive"}
        assert dict(first.attributes) == dict(last.attributes) == stamps  # type: ignore[attr-defined]
        assert dict(touched.attributes) == {**stamps, "rl.extra": 7}  # type: ignore[attr-defined]
        rlsight.flush_telemetry()
    finally:
        rlsight.shutdown_telemetry()
    stored = [sp for line in _stored_spans(tmp_path)
              if (sp := json.loads(line[line.index('{"traceId"'):]))["name"] == "rl.rollout.generate"]
    stored.sort(key=lambda sp: int(sp["startTimeUnixNano"]))
    assert [{kv["key"] for kv in sp["attributes"]} for sp in stored] == [
        set(stamps), {*stamps, "rl.extra"}, set(stamps)]


def test_live_spans_of_one_site_share_their_dict_apart_from_the_plain_ones(tmp_path: Path) -> None:
    """``live=True`` is a constant, so ``live=True`` spans of one site share one dict too
    (bench_live: a live span costs at most 1.3x an ordinary one), never the plain spans'
    dict; both kinds are stored with their own attributes, and only the live one gets a
    start record's mark."""
    rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=["all"]))
    try:
        kept = []
        for live in (True, True, False):
            with span(RL.REWARD, "rl.reward.score", **({"live": True} if live else {})) as s:
                pass
            kept.append(s)
        rlsight.flush_telemetry()
    finally:
        rlsight.shutdown_telemetry()
    first, second, plain = (k._attributes for k in kept)  # type: ignore[attr-defined]
    assert first is second and first is not plain
    assert first == {"rl.live": True, **plain}
    stored = [{kv["key"] for kv in sp["attributes"]} for line in _stored_spans(tmp_path)
              if (sp := json.loads(line[line.index('{"traceId"'):]))["name"] == "rl.reward.score"]
    assert sorted(stored, key=len) == [set(plain), set(first), set(first)]


def test_efficiency_spans_of_one_site_share_their_dict_concurrent_ones_another(
        tmp_path: Path) -> None:
    """An efficiency span's measurement attribute is a constant: the efficiency spans of one
    category and thread share one dict (each made and cleaned one of its own), a concurrent
    one another, another category a third; each is stored with its own attributes."""
    rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=["all"]))
    try:
        kept = []
        for category, concurrent in (("idle/barrier", False), ("idle/barrier", False),
                                     ("idle/barrier", True), ("idle/barrier", True),
                                     ("idle/buffer_starvation", False)):
            with rlsight.efficiency_span(category, concurrent=concurrent) as s:
                pass
            kept.append(s)
        rlsight.flush_telemetry()
    finally:
        rlsight.shutdown_telemetry()
    one, two, three, four, other = (k._attributes for k in kept)  # type: ignore[attr-defined]
    assert one is two and three is four and len({id(one), id(three), id(other)}) == 3
    stamps = {"rl.efficiency.measurement": "span", "rl.span_group": "efficiency",
              "thread.id": threading.get_native_id(), "rl.bucket": "idle",
              "rl.efficiency.category": "idle/barrier"}
    assert one == stamps and three == {**stamps, "rl.concurrent": True}
    assert other == {**stamps, "rl.efficiency.category": "idle/buffer_starvation"}
    stored = [{kv["key"]: kv["value"] for kv in sp["attributes"]}
              for line in _stored_spans(tmp_path)
              if (sp := json.loads(line[line.index('{"traceId"'):]))["name"].startswith(
                  "rl.efficiency.")]
    assert sorted(a.get("rl.concurrent", {}).get("boolValue", False) for a in stored) == [
        False, False, False, True, True]


def test_a_shared_dict_over_the_limits_goes_through_the_sdks_cleaning_on_every_span() -> None:
    """A shared dict is looked at once, but one the SDK would change (text over the length
    limit) is never remembered as plain: every span of it gets the SDK's cleaning."""
    from opentelemetry.sdk.trace import SpanLimits

    provider = sdk_trace.TracerProvider(shutdown_on_exit=False,
                                        span_limits=SpanLimits(max_span_attribute_length=4))
    starter = LeanStarter(provider.get_tracer("t"))
    long_text = {"rl.span_group": "generation"}
    short = {"rl.span_group": "gen"}
    spans = [starter.start("x", attrs, None, shared=True)
             for attrs in (long_text, long_text, short, short)]
    assert [dict(s.attributes) for s in spans if s is not None] == [
        {"rl.span_group": "gene"}, {"rl.span_group": "gene"},
        {"rl.span_group": "gen"}, {"rl.span_group": "gen"}]
    assert spans[3] is not None and spans[3]._attributes is short
