"""What the metrics tee and the engine readers cost, next to writing the same values to a dict.

1. ``record_metrics`` for a 20-key group (telemetry on, local store), against a loop writing
   the 20 values into a plain dict, against 20 raw SDK ``gauge.set`` calls (what recording by
   hand costs), and with telemetry off (the no-op a run pays when telemetry is disabled).
2. An engine snapshot plus delta of a ``prometheus_client`` registry holding 50 series shaped
   like vLLM's (4 engines), against writing the same sample values into a plain dict, and
   against ``registry.collect()`` alone (the part prometheus_client itself costs).

3. A long run: memory the meter provider holds and what one store collection costs after
   N steps of 21 step-scoped series (20 counters and a gauge carrying ``rl.step``, one delta
   store reader writing real store lines), with rlsight's pruning of finished steps
   (``_step_series``) against the SDK's default (every step's aggregations kept and walked
   on every collection). Memory is tracemalloc's count of what building and feeding the
   provider left allocated (after a garbage collection); the collection time is the median
   of 15 collections, each after one more step's points.

Issue 4 asks for the ratios; there is no target. The OTel SDK call (7-17 µs per measurement
here) dominates the first one, which is why the tee runs once per step, not per sample.
"""

from __future__ import annotations

import gc
import math
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import compare, emit_json, parse_args, ratio_table
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

import rlsight
from rlsight import TelemetryConfig
from rlsight.engines import EngineMetricsReader
from rlsight.metrics import MetricSpec, record_metrics, register_metric_group

KEYS = 20
ENGINES = ("0", "1", "2", "3")


def tee(quick: bool) -> dict[str, object]:
    specs = [MetricSpec(f"bench.m{i}", f"train/m{i}", "gauge", "1", "bench") for i in range(KEYS)]
    register_metric_group("bench", specs)
    values = {f"train/m{i}": float(i) for i in range(KEYS)}
    attributes = {"rl.step": 1, "rl.window": "step"}
    plain: dict[str, object] = {}

    def dict_write() -> None:
        for key, value in values.items():
            plain[key] = value

    def off() -> None:
        record_metrics("bench", values, attributes)

    res_off = compare({"dict write, 20 keys": dict_write, "record_metrics, telemetry off": off},
                      number=2_000 if quick else 20_000, rounds=5 if quick else 15)

    tel = rlsight.setup_telemetry(TelemetryConfig(run_dir=tempfile.mkdtemp(prefix="rlsight-bench-")))
    try:
        gauges = [tel.meter.create_gauge(f"bench.raw{i}", "1", "bench") for i in range(KEYS)]

        def raw_sdk() -> None:
            for gauge, value in zip(gauges, values.values(), strict=True):
                gauge.set(value, attributes)

        def on() -> None:
            record_metrics("bench", values, attributes)

        store_reader = tel._local_metric_reader
        assert store_reader is not None

        def store_write() -> None:
            # What the local store's 50 ms metric writer does on each tick (issue #18): one
            # collection of every instrument the step above created; with nothing recorded
            # since the last tick it writes no line.
            store_reader.collect()

        res_on = compare(
            {"dict write, 20 keys": dict_write, "raw SDK gauge.set x20": raw_sdk,
             "record_metrics, 20 keys": on, "store metric write (one 50 ms tick)": store_write},
            number=100 if quick else 1_000, rounds=5 if quick else 15,
        )
    finally:
        rlsight.shutdown_telemetry()
    doc_off = ratio_table("record_metrics, telemetry off", res_off, [
        ("off / dict write", "record_metrics, telemetry off", "dict write, 20 keys")])
    doc_on = ratio_table("record_metrics, 20-key group, telemetry on (local store)", res_on, [
        ("record_metrics / dict write", "record_metrics, 20 keys", "dict write, 20 keys"),
        ("record_metrics / raw SDK", "record_metrics, 20 keys", "raw SDK gauge.set x20"),
        ("one store tick / record_metrics", "store metric write (one 50 ms tick)",
         "record_metrics, 20 keys"),
    ])
    return {"off": doc_off, "on": doc_on}


def _vllm_registry() -> CollectorRegistry:
    """50 series: 5 counters and 3 histograms per engine, finish reasons, 6 unmapped gauges."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    counters = [Counter(name, "bench", labels, registry=registry) for name in (
        "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions",
        "vllm:prefix_cache_hits", "vllm:prefix_cache_queries")]
    success = Counter("vllm:request_success", "bench", [*labels, "finished_reason"], registry=registry)
    histograms = [Histogram(name, "bench", labels, buckets=buckets, registry=registry)
                  for name, buckets in (
                      ("vllm:time_to_first_token_seconds", (0.01, 0.1, 1.0, 10.0)),
                      ("vllm:request_prompt_tokens", (16, 64, 256, 1024)),
                      ("vllm:request_generation_tokens", (16, 64, 256, 1024)))]
    for engine in ENGINES:
        for i, counter in enumerate(counters):
            counter.labels("m", engine).inc(1000 * (i + 1))
        for reason in ("stop", "length", "abort"):
            success.labels("m", engine, reason).inc(10)
        for histogram in histograms:
            histogram.labels("m", engine).observe(5.0)
    running = Gauge("vllm:num_requests_running", "bench", labels, registry=registry)
    for engine in ("0", "1", "2", "3", "4", "5"):
        running.labels("m", engine).set(1)
    return registry


def engine(quick: bool) -> dict[str, object]:
    registry = _vllm_registry()
    reader = EngineMetricsReader.from_registry(registry, flavor="vllm")
    base = reader.snapshot()
    families = list(registry.collect())
    histogram_series = sum(1 for f in families if f.type == "histogram"
                           for s in f.samples if s.name.endswith("_count"))
    series = histogram_series + sum(
        1 for f in families if f.type != "histogram" for s in f.samples
        if not s.name.endswith("_created"))
    assert series == 50, series
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in registry.collect() for s in f.samples}
    plain: dict[object, float] = {}

    def dict_write() -> None:
        for key, value in samples.items():
            plain[key] = value

    def collect_only() -> None:
        for family in registry.collect():
            for _ in family.samples:
                pass

    def snapshot_delta() -> None:
        reader.delta(base, reader.snapshot())

    res = compare(
        {f"dict write, {len(samples)} samples": dict_write, "registry.collect() only": collect_only,
         "snapshot + delta, 50 series": snapshot_delta},
        number=50 if quick else 500, rounds=5 if quick else 15,
    )
    print(f"  ({series} series, {histogram_series} of them histograms; {len(samples)} samples)")
    return ratio_table("engine snapshot + delta, vLLM-shaped registry", res, [
        ("snapshot+delta / dict write", "snapshot + delta, 50 series",
         f"dict write, {len(samples)} samples"),
        ("snapshot+delta / collect only", "snapshot + delta, 50 series", "registry.collect() only"),
    ])


SERIES_COUNTERS = 20


def _long_run(steps: int, pruned: bool) -> tuple[float, float, int]:
    """(MiB held, ms per collection, aggregations kept) after ``steps`` steps."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from rlsight._instruments import InstrumentCache
    from rlsight._pruned_reader import PrunedPeriodicReader
    from rlsight.store._exporters import LocalMetricExporter
    from rlsight.store._sink import FileSink

    folder = Path(tempfile.mkdtemp(prefix="rlsight-bench-series-"))
    tracemalloc.start()
    sink = FileSink(folder / "metrics.jsonl")
    kind = PrunedPeriodicReader if pruned else PeriodicExportingMetricReader
    reader = kind(LocalMetricExporter(sink), export_interval_millis=math.inf)
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    cache = InstrumentCache()
    series = cache.series
    if isinstance(reader, PrunedPeriodicReader):
        reader.prune_with(lambda r: series.after_collect(provider, r, _fail))
    meter = provider.get_meter("rlsight")
    counters = [cache.counter(meter, f"bench.c{i}", "1", "") for i in range(SERIES_COUNTERS)]
    gauge = cache.gauge(meter, "bench.g", "1", "")

    def step(s: int) -> None:
        with series.lock:  # as rlsight's recording does
            series.saw(s)
            for counter in counters:
                counter.add(1.0, {"rl.step": s, "rl.bucket": "idle"})
            gauge.set(1.0, {"rl.step": s})

    for s in range(steps):
        step(s)
        if s % 100 == 0:  # the store's 50 ms writer ticks many times a step in a real run
            reader.collect()
    reader.collect()
    gc.collect()  # what is held, not garbage awaiting the next cycle collection
    held = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    times = []
    for s in range(steps, steps + 15):
        step(s)
        t0 = time.perf_counter()
        reader.collect()
        times.append(time.perf_counter() - t0)
    storage = provider._measurement_consumer._reader_storages[reader]
    kept = sum(len(m._attributes_aggregation)
               for ms in storage._instrument_view_instrument_matches.values() for m in ms)
    provider.shutdown()
    sink.close()
    return held, statistics.median(times) * 1e3, kept


def _fail(site: str, exc: BaseException) -> None:
    raise RuntimeError(site) from exc


def long_run(quick: bool) -> dict[str, object]:
    lines = ["## a long run: 21 step-scoped series per step, one delta store reader",
             f"  {'steps':>6} {'':<12} {'MiB held':>9} {'ms/collect':>11} {'aggregations':>13}"]
    rows: dict[str, object] = {}
    for i, steps in enumerate((200, 1_000) if quick else (1_000, 5_000)):
        order = (False, True) if i % 2 == 0 else (True, False)  # who runs first alternates
        got = {pruned: _long_run(steps, pruned) for pruned in order}
        for pruned in (False, True):
            held, ms, kept = got[pruned]
            name = "pruned" if pruned else "SDK default"
            lines.append(f"  {steps:>6} {name:<12} {held:>9.2f} {ms:>11.2f} {kept:>13}")
            rows[f"{steps}:{name}"] = {"mib": round(held, 2), "collect_ms": round(ms, 3),
                                       "aggregations": kept}
    print("\n".join(lines))
    return rows


def main() -> None:
    args = parse_args()
    docs = {"tee": tee(args.quick), "engine": engine(args.quick), "long_run": long_run(args.quick)}
    if args.json:
        emit_json(docs)


if __name__ == "__main__":
    main()
