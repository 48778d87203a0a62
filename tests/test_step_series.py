"""Finished steps' aggregations are dropped after each collection of rlsight's delta readers.

Real SDK throughout: a MeterProvider with a pruned reader next to an unpruned one, fed the same
measurements, must export the same points, while the pruned one keeps a bounded table.
"""

from __future__ import annotations

import math
import re
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)

import rlsight
from rlsight import MetricSpec, TelemetryConfig
from rlsight._instruments import InstrumentCache
from rlsight._pruned_reader import PrunedPeriodicReader
from rlsight._semconv import STEP
from rlsight._step_series import KEEP_STEPS, SITE, StepSeries
from rlsight.store import read_metrics
from rlsight.store._exporters import delta_temporality
from rlsight.store._otlp_json import encode_metrics
from rlsight.testing import isolated_metric_groups


class _Kept(MetricExporter):
    """Keeps every collection it is handed (the SDK's exporter interface, in memory)."""

    def __init__(self, temporality: dict[type, AggregationTemporality] | None = None) -> None:
        super().__init__(preferred_temporality=temporality or delta_temporality())
        self.batches: list[MetricsData] = []

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        self.batches.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


class _Pair:
    """One provider, one pruned and one plain delta reader, and rlsight's recording path."""

    def __init__(self, temporality: dict[type, AggregationTemporality] | None = None) -> None:
        self.pruned_out, self.plain_out = _Kept(temporality), _Kept()
        self.pruned = PrunedPeriodicReader(self.pruned_out, export_interval_millis=math.inf)
        self.plain = PeriodicExportingMetricReader(self.plain_out, export_interval_millis=math.inf)
        self.provider = MeterProvider(metric_readers=[self.pruned, self.plain])
        self.errors: list[tuple[str, BaseException]] = []
        self.cache = InstrumentCache()
        self.series: StepSeries = self.cache.series
        self.pruned.prune_with(lambda reader: self.series.after_collect(
            self.provider, reader, lambda site, exc: self.errors.append((site, exc))))
        self.meter = self.provider.get_meter("rlsight")
        #: (before, after) of each collection: the SDK stamps it with a time in between.
        self.pruned_spans: list[tuple[int, int]] = []
        self.plain_spans: list[tuple[int, int]] = []

    def record(self, kind: str, step: int | None, value: float, label: str = "a") -> None:
        attributes: dict[str, Any] = {"label": label}
        if step is not None:
            attributes[STEP] = step
        with self.series.lock:
            if step is not None:
                self.series.saw(step)
            if kind == "counter":
                self.cache.counter(self.meter, "t.counter", "1", "").add(value, attributes)
            elif kind == "gauge":
                self.cache.gauge(self.meter, "t.gauge", "1", "").set(value, attributes)
            else:
                self.cache.histogram(self.meter, "t.histogram", "1", "", (1.0, 10.0)).record(
                    value, attributes)

    def collect(self) -> None:
        for reader, spans in ((self.pruned, self.pruned_spans), (self.plain, self.plain_spans)):
            before = time.time_ns()
            reader.collect()
            spans.append((before, time.time_ns()))

    def kept(self, reader: Any = None) -> int:
        storage = self.provider._measurement_consumer._reader_storages[reader or self.pruned]
        return sum(len(m._attributes_aggregation)
                   for ms in storage._instrument_view_instrument_matches.values() for m in ms)

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def pair() -> Iterator[_Pair]:
    p = _Pair()
    yield p
    p.close()


def _points(batches: Sequence[MetricsData],
            spans: Sequence[tuple[int, int]]) -> list[list[tuple[Any, ...]]]:
    """Each export's points as (metric, attributes, value, start), the start as an ordinal.

    A start is the collection it equals (its index among all collections, by the time
    window around each) or, for a series whose aggregation was made since, ``"new"``.
    """

    def ordinal(start: int | None) -> int | str | None:
        if start is None:
            return None
        for i, (before, after) in enumerate(spans):
            if before <= start <= after:
                return i
        return "new"

    out = []
    for batch in batches:
        points = []
        for rm in batch.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    for p in m.data.data_points:
                        value = getattr(p, "value", None)
                        if value is None:
                            value = (p.count, p.sum, tuple(p.bucket_counts), p.min, p.max)
                        points.append((m.name, tuple(sorted(p.attributes.items())), value,
                                       ordinal(p.start_time_unix_nano)))
        out.append(points)
    return out


def _lines(batches: Sequence[MetricsData], spans: Sequence[tuple[int, int]]) -> list[bytes]:
    """The store's line of each export, each time written as the collection it falls in."""

    def ordinal(match: re.Match[bytes]) -> bytes:
        stamp = int(match.group(2))
        for i, (before, after) in enumerate(spans):
            if before <= stamp <= after:
                return match.group(1) + b"#%d" % i
        return match.group(1) + b"#new"

    return [re.sub(rb'("(?:startTimeUnixNano|timeUnixNano)":")(\d+)', ordinal,
                   encode_metrics(batch) or b"") for batch in batches]


_ACTION = st.one_of(
    st.tuples(st.just("record"), st.sampled_from(["counter", "gauge", "histogram"]),
              st.one_of(st.none(), st.integers(0, 4)), st.integers(0, 20), st.sampled_from("ab")),
    st.just(("collect",)),
)


class TestSamePoints:
    @settings(max_examples=300, deadline=None)
    @given(st.lists(_ACTION, max_size=60))
    def test_pruned_reader_exports_what_the_plain_one_does(self, actions: list[Any]) -> None:
        pair = _Pair()
        try:
            # A model of what pruning drops: after a collection, every series of a step not
            # among the KEEP_STEPS latest recorded. A dropped series recorded again starts
            # anew ("new") in the next export; every other point must match exactly.
            recent: list[int] = []
            alive: set[tuple[Any, ...]] = set()
            dropped: set[tuple[Any, ...]] = set()
            revived: list[set[tuple[Any, ...]]] = []  # per export (a collection with points)
            pending: set[tuple[Any, ...]] | None = None  # since the last collection
            for action in actions:
                if action[0] == "collect":
                    pair.collect()
                    if pending is not None:
                        revived.append(pending)
                        pending = None
                    gone = {k for k in alive if dict(k[1]).get(STEP, None) is not None
                            and dict(k[1])[STEP] not in recent}
                    alive -= gone
                    dropped |= gone
                    continue
                _, kind, step, value, label = action
                pair.record(kind, step, float(value), label)
                attributes = {"label": label} if step is None else {"label": label, STEP: step}
                key = (f"t.{kind}", tuple(sorted(attributes.items())))
                if step is not None:
                    if step in recent:
                        recent.remove(step)
                    recent.insert(0, step)
                    del recent[KEEP_STEPS:]
                pending = set() if pending is None else pending
                if key in dropped:
                    dropped.discard(key)
                    pending.add(key)
                alive.add(key)
            pair.collect()
            if pending is not None:
                revived.append(pending)
            pruned = _points(pair.pruned_out.batches, pair.pruned_spans)
            plain = _points(pair.plain_out.batches, pair.plain_spans)
            assert len(pruned) == len(plain) == len(revived)
            for got, want, anew in zip(pruned, plain, revived, strict=True):
                # (a gauge's point has no start: revived or not, it reads the same)
                expected = [(*w[:3], "new") if w[:2] in anew and w[3] is not None else w
                            for w in want]
                if anew:  # a revived series is new in the SDK's table: it comes last
                    assert sorted(got, key=repr) == sorted(expected, key=repr)
                else:  # the same points in the same order: the same store line
                    assert got == expected
            for got_line, want_line, anew in zip(
                    _lines(pair.pruned_out.batches, pair.pruned_spans),
                    _lines(pair.plain_out.batches, pair.plain_spans), revived, strict=True):
                if not anew:
                    assert got_line == want_line
            assert pair.errors == []
        finally:
            pair.close()

    def test_a_revived_old_step_differs_only_in_its_start(self, pair: _Pair) -> None:
        pair.record("counter", 1, 1.0)
        pair.collect()
        for step in range(2, 2 + KEEP_STEPS):
            pair.record("counter", step, 1.0)
        pair.collect()  # step 1 is no longer among the latest: dropped
        pair.record("counter", 1, 5.0)
        pair.collect()
        got, want = pair.pruned_out.batches[-1], pair.plain_out.batches[-1]
        (p,), (w,) = (b.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
                      for b in (got, want))
        assert (p.value, p.attributes) == (w.value, w.attributes) == (5.0, {"label": "a", STEP: 1})
        assert p.start_time_unix_nano > w.start_time_unix_nano  # made at the measurement


def _nonempty(kept: _Kept) -> list[MetricsData]:
    return [b for b in kept.batches if any(
        p for rm in b.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        for p in m.data.data_points)]


class TestBounded:
    def test_aggregations_stay_at_the_latest_steps_however_long_the_run(self, pair: _Pair) -> None:
        for step in range(500):
            for kind in ("counter", "gauge", "histogram"):
                pair.record(kind, step, 1.0)
            pair.record("counter", None, 1.0, "b")  # no rl.step: kept for the run
            if step % 5 == 0:
                pair.collect()
        pair.collect()
        assert pair.kept() == 3 * KEEP_STEPS + 1
        assert pair.kept(pair.plain) == 3 * 500 + 1

    def test_a_point_not_yet_collected_is_never_dropped(self, pair: _Pair) -> None:
        for step in range(5):
            pair.record("counter", step, 1.0)
        storage = pair.provider._measurement_consumer._reader_storages[pair.pruned]
        assert pair.series.prune(storage) == 0  # all hold a delta nobody took yet
        pair.collect()
        assert pair.kept() == KEEP_STEPS
        (batch,) = _nonempty(pair.pruned_out)
        assert len(batch.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points) == 5

    def test_a_cumulative_reader_keeps_every_series(self) -> None:
        cumulative = dict.fromkeys(delta_temporality(), AggregationTemporality.CUMULATIVE)
        pair = _Pair(cumulative)
        try:
            for step in range(10):
                pair.record("counter", step, 1.0)
                pair.collect()
            assert pair.kept() == 10
            last = pair.pruned_out.batches[-1].resource_metrics[0].scope_metrics[0].metrics[0]
            assert len(last.data.data_points) == 10  # each step's run total, every time
        finally:
            pair.close()

    def test_instruments_rlsight_did_not_make_are_left_alone(self, pair: _Pair) -> None:
        theirs = pair.meter.create_counter("user.counter")
        for step in range(10):
            theirs.add(1, {STEP: step})
            pair.record("counter", step, 1.0)
            pair.collect()
        assert pair.kept() == 10 + KEEP_STEPS


class TestPrometheus:
    def test_the_scraped_reader_prunes_and_still_serves_the_run_total(self) -> None:
        pytest.importorskip("opentelemetry.exporter.prometheus")
        from prometheus_client import CollectorRegistry

        from rlsight._prometheus import StepFoldingReader

        registry = CollectorRegistry(auto_describe=False)
        reader = StepFoldingReader(registry)
        provider = MeterProvider(metric_readers=[reader])
        cache = InstrumentCache()
        reader.prune_with(lambda r: cache.series.after_collect(provider, r, _raise))
        counter = cache.counter(provider.get_meter("rlsight"), "t.samples", "", "")
        try:
            scope = {"otel_scope_name": "rlsight", "otel_scope_schema_url": "",
                     "otel_scope_version": ""}
            for step in range(50):
                with cache.series.lock:
                    cache.series.saw(step)
                    counter.add(2, {STEP: step})
                # a scrape: it collects, folds, prunes, then serves the run total
                assert registry.get_sample_value("t_samples_total", scope) == 2 * (step + 1)
            storage = provider._measurement_consumer._reader_storages[reader]
            (match,) = storage._instrument_view_instrument_matches[counter]
            assert len(match._attributes_aggregation) == KEEP_STEPS
        finally:
            provider.shutdown()


def _raise(site: str, exc: BaseException) -> None:
    raise AssertionError(site) from exc


class TestFailure:
    def test_a_failed_pruning_is_reported_once_and_stops(self, pair: _Pair) -> None:
        reports: list[str] = []

        def report(site: str, exc: BaseException) -> None:
            reports.append(site)
            raise exc  # as under strict: the collection must still stand

        broken = object()  # no SDK internals to read
        pair.series.after_collect(broken, pair.pruned, report)  # type: ignore[arg-type]
        pair.series.after_collect(broken, pair.pruned, report)  # type: ignore[arg-type]
        assert reports == [SITE]
        for step in range(5):
            pair.record("counter", step, 1.0)
            pair.collect()
        assert pair.kept() == 5  # off: the SDK's tables grow as without rlsight's pruning


class TestConcurrency:
    def test_recording_threads_during_collections_lose_nothing(self, pair: _Pair) -> None:
        threads, steps, per = 6, 60, 40
        failures: list[BaseException] = []
        done = threading.Event()

        def work(label: str) -> None:
            try:
                for step in range(steps):
                    for _ in range(per):
                        pair.record("counter", step, 1.0, label)
                    pair.record("gauge", step, float(step), label)
            except BaseException as exc:
                failures.append(exc)

        def collect() -> None:
            while not done.is_set():
                pair.pruned.collect()

        # Threads switch every microsecond (not 5 ms): a recording caught between the SDK's
        # look-up of an aggregation and its use, while the pruning drops it, is then likely.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            collector = threading.Thread(target=collect)
            collector.start()
            workers = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            done.set()
            collector.join()
        finally:
            sys.setswitchinterval(switch)
        pair.pruned.collect()
        assert failures == [] and pair.errors == []
        sums: dict[tuple[str, int], float] = defaultdict(float)
        gauges: set[tuple[str, int]] = set()
        for batch in pair.pruned_out.batches:
            for metric in batch.resource_metrics[0].scope_metrics[0].metrics:
                for p in metric.data.data_points:
                    key = (p.attributes["label"], p.attributes[STEP])
                    if metric.name == "t.counter":
                        sums[key] += p.value
                    else:
                        gauges.add(key)
        everything = {(f"w{i}", s) for i in range(threads) for s in range(steps)}
        assert sums == dict.fromkeys(everything, float(per))
        assert gauges == everything
        assert pair.kept() <= 2 * threads * KEEP_STEPS


    def test_pruning_never_waits_for_a_recording_in_progress_and_the_next_one_prunes(
            self, pair: _Pair) -> None:
        """A recording may hold the lock for long (its caller's thread); a reader's flush or
        shutdown must not wait behind it, so the pruning skips that collection."""
        for step in range(3):
            pair.record("counter", step, 1.0)
        pair.pruned.collect()  # steps 1 and 2 are the latest: kept
        storage = pair.provider._measurement_consumer._reader_storages[pair.pruned]
        dropped: list[int] = []
        with pair.series.lock:  # as a recording between the SDK's look-up and its add()
            pair.series.saw(5)
            pair.series.saw(6)
            pruning = threading.Thread(target=lambda: dropped.append(pair.series.prune(storage)))
            pruning.start()
            pruning.join(5)
            assert not pruning.is_alive() and dropped == [0]
        assert pair.series.prune(storage) == 2


_SPECS = [MetricSpec(f"series_test.m{i}", f"series_test/m{i}", "counter" if i % 2 else "gauge",
                     "1", "A test scalar.") for i in range(6)]


def _group() -> None:
    rlsight.record_metrics("series_test", {s.logger_key: 1.0 for s in _SPECS}, {STEP: 1})


def _efficiency() -> None:
    rlsight.tee_step_metrics(1, {})  # no group registered: efficiency only


def _engine() -> None:
    from rlsight.engines import EngineSeries, record_engine_deltas

    record_engine_deltas(1, {EngineSeries("rl.engine.prompt_tokens"): 3.0}, engine="gen/0")


def _goodput() -> None:
    with rlsight.job_span(), rlsight.step_span(1):
        pass


def _names(runtime: Any) -> set[str]:
    """Metrics the store's reader holds an aggregation of a step for."""
    reader = runtime._local_metric_reader
    storage = runtime._meter_provider._measurement_consumer._reader_storages[reader]
    return {instrument.name for instrument, ms in storage._instrument_view_instrument_matches.items()
            for m in ms for a in m._attributes_aggregation.values() if STEP in (a._attributes or {})}


class TestRuntime:
    @pytest.mark.parametrize("record", [_group, _efficiency, _engine, _goodput],
                             ids=["group", "efficiency", "engine", "goodput"])
    def test_step_scoped_recording_holds_the_pruning_lock(self, tmp_path: Path, record: Any) -> None:
        with isolated_metric_groups():
            if record is _group:
                rlsight.register_metric_group("series_test", _SPECS)
            runtime = rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path / "run")))
            try:
                with rlsight.efficiency_span("idle/barrier"):
                    pass
                series = runtime.run_state.instruments.series
                recording = threading.Thread(target=record)
                with series.lock:  # as the pruning does: no step's point may land meanwhile
                    recording.start()
                    recording.join(0.5)
                    assert _names(runtime) == set()
                recording.join()
                assert series._recent == [1] and _names(runtime)
            finally:
                runtime.shutdown()

    def test_a_value_converting_slowly_holds_up_no_other_threads_recording(self, tmp_path: Path) -> None:
        """A logger value's conversion is the caller's code (a tensor's .item() waits for its
        device): run under the recording lock, it held up every other thread's step-scoped
        points and each reader's pruning (a flush then read as timed out)."""

        class _Slow:
            def __init__(self) -> None:
                self.entered, self.release = threading.Event(), threading.Event()

            def item(self) -> float:
                self.entered.set()
                self.release.wait(30)
                return 2.0

        slow = _Slow()
        with isolated_metric_groups():
            rlsight.register_metric_group("series_test", _SPECS)
            runtime = rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path / "run")))
            try:
                converting = threading.Thread(target=lambda: rlsight.record_metrics(
                    "series_test", {_SPECS[0].logger_key: slow}, {STEP: 1}))
                converting.start()
                assert slow.entered.wait(30)
                other = threading.Thread(target=_group)  # floats, step 1, another thread
                other.start()
                other.join(10)
                done = not other.is_alive()
                slow.release.set()
                converting.join(30)
                assert done, "a float's recording waited for another thread's conversion"
            finally:
                slow.release.set()
                runtime.shutdown()

    def test_a_run_keeps_the_store_readers_table_bounded_and_writes_every_point(
            self, tmp_path: Path) -> None:
        with isolated_metric_groups():
            rlsight.register_metric_group("series_test", _SPECS)
            runtime = rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path / "run")))
            try:
                reader = runtime._local_metric_reader
                assert reader is not None
                for step in range(300):
                    rlsight.tee_step_metrics(step, {s.logger_key: 1.0 for s in _SPECS})
                    if step % 7 == 0:
                        reader.collect()
                reader.collect()
                storage = runtime._meter_provider._measurement_consumer._reader_storages[reader]
                kept = sum(len(m._attributes_aggregation)
                           for ms in storage._instrument_view_instrument_matches.values() for m in ms)
                assert kept <= len(_SPECS) * KEEP_STEPS + 1
            finally:
                runtime.shutdown()
        points = [p for p in read_metrics(tmp_path / "run").points
                  if p.name.startswith("series_test.")]
        assert len(points) == 300 * len(_SPECS)
        assert sorted({p.attributes[STEP] for p in points}) == list(range(300))
