"""Engine readers: real prometheus_client registries and a real aiohttp /metrics server."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from rlsight.engines import (
    EngineFlavor,
    EngineHistogram,
    EngineMetricsReader,
    EngineSeries,
    EngineSnapshot,
    record_engine_deltas,
)
from rlsight.errors import RlsightWarning, reset_warn_once
from rlsight.store import read_metrics
from rlsight.testing import capture_telemetry

PROMPT = EngineSeries("rl.engine.prompt_tokens")
GENERATION = EngineSeries("rl.engine.generation_tokens")
HITS = EngineSeries("rl.engine.prefix_cache.hits")
TTFT = EngineSeries("rl.engine.time_to_first_token")
LABELS = ["model_name", "engine"]


class FakeVllm:
    """A registry holding series under vLLM's real names and label layout."""

    def __init__(self, engines: tuple[str, ...] = ("0",)) -> None:
        self.registry = CollectorRegistry()
        self.engines = engines
        r = self.registry
        self.prompt = Counter("vllm:prompt_tokens", "prefill tokens", LABELS, registry=r)
        self.generation = Counter("vllm:generation_tokens", "generated", LABELS, registry=r)
        self.success = Counter(
            "vllm:request_success", "finished", [*LABELS, "finished_reason"], registry=r
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "ttft", LABELS, buckets=[0.1, 1.0], registry=r
        )
        self.running = Gauge("vllm:num_requests_running", "running", LABELS, registry=r)
        for engine in engines:
            for reason in ("stop", "length", "abort"):
                self.success.labels("m", engine, reason)

    def generate(self, tokens: int, engine: str = "0") -> None:
        self.generation.labels("m", engine).inc(tokens)


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    """Engine warnings fire once per process; each test sees its own first time."""
    reset_warn_once()


def reader_for(fake: FakeVllm) -> EngineMetricsReader:
    return EngineMetricsReader.from_registry(fake.registry, flavor="vllm")


class TestCounters:
    def test_delta_is_what_the_counter_gained_between_snapshots(self) -> None:
        fake = FakeVllm()
        fake.generate(100)
        reader = reader_for(fake)
        before = reader.snapshot()
        fake.generate(42)
        assert reader.delta(before, reader.snapshot())[GENERATION] == 42.0

    def test_labels_not_kept_are_summed_over_engines(self) -> None:
        fake = FakeVllm(engines=("0", "1"))
        reader = reader_for(fake)
        before = reader.snapshot()
        fake.generate(10, engine="0")
        fake.generate(5, engine="1")
        assert reader.delta(before, reader.snapshot())[GENERATION] == 15.0

    def test_finish_reason_label_becomes_an_attribute_of_the_delta(self) -> None:
        fake = FakeVllm()
        reader = reader_for(fake)
        before = reader.snapshot()
        fake.success.labels("m", "0", "stop").inc(9)
        fake.success.labels("m", "0", "length").inc(1)
        delta = reader.delta(before, reader.snapshot())
        success = "rl.engine.request.success"
        assert delta[EngineSeries(success, (("rl.engine.finish_reason", "stop"),))] == 9.0
        assert delta[EngineSeries(success, (("rl.engine.finish_reason", "length"),))] == 1.0
        assert delta[EngineSeries(success, (("rl.engine.finish_reason", "abort"),))] == 0.0

    def test_series_the_engine_does_not_expose_is_absent_not_zero(self) -> None:
        fake = FakeVllm()
        reader = reader_for(fake)
        delta = reader.delta(reader.snapshot(), reader.snapshot())
        assert HITS not in delta
        assert EngineSeries("rl.engine.preemptions") not in delta

    def test_series_that_appears_between_snapshots_counts_from_zero(self) -> None:
        fake = FakeVllm()
        reader = reader_for(fake)
        before = reader.snapshot()
        fake.prompt.labels("m", "0").inc(7)
        assert reader.delta(before, reader.snapshot())[PROMPT] == 7.0

    def test_counter_reset_gives_the_new_value_not_a_negative_delta(self) -> None:
        old, restarted = FakeVllm(), FakeVllm()
        old.generate(1000)
        restarted.generate(30)
        prev = reader_for(old).snapshot()
        cur = reader_for(restarted).snapshot()
        with pytest.warns(RlsightWarning, match=r"went down \(1000 -> 30\): treated as a reset"):
            assert EngineMetricsReader.delta(prev, cur)[GENERATION] == 30.0

    def test_a_reset_on_one_engine_does_not_hide_in_the_sum_over_engines(self) -> None:
        """Deltas are taken per engine series before summing, so a restart is seen."""
        before_fake = FakeVllm(engines=("0", "1"))
        before_fake.generate(100, engine="0")
        before_fake.generate(100, engine="1")
        after_fake = FakeVllm(engines=("0", "1"))
        after_fake.generate(150, engine="0")
        after_fake.generate(20, engine="1")  # engine 1 restarted and made 20
        prev, cur = reader_for(before_fake).snapshot(), reader_for(after_fake).snapshot()
        with pytest.warns(RlsightWarning, match="treated as a reset"):
            assert EngineMetricsReader.delta(prev, cur)[GENERATION] == 50.0 + 20.0


class TestRenamedSeries:
    @pytest.mark.parametrize("flavor", ["vllm", "sglang"])
    def test_ray_sanitised_names_are_read_like_the_originals(self, flavor: str) -> None:
        """Ray's metrics path turns ``vllm:x`` into ``vllm_x``; both flavors read either."""
        registry = CollectorRegistry()
        name = "vllm_prompt_tokens" if flavor == "vllm" else "sglang_prompt_tokens"
        prompt = Counter(name, "prefill", ["model_name"], registry=registry)
        prompt.labels("m")
        reader = EngineMetricsReader.from_registry(registry, flavor=flavor)
        before = reader.snapshot()
        prompt.labels("m").inc(12)
        assert reader.delta(before, reader.snapshot())[PROMPT] == 12.0

    def test_the_pre_0_9_vllm_prefix_cache_name_is_no_longer_read(self) -> None:
        registry = CollectorRegistry()
        Counter("vllm:gpu_prefix_cache_hits", "old name", registry=registry).inc(3)
        with pytest.warns(RlsightWarning, match="found none of the vllm series"):
            snapshot = EngineMetricsReader.from_registry(registry, flavor="vllm").snapshot()
        assert snapshot is not None and dict(snapshot.values) == {}

    def test_sglang_step_tokens_come_from_its_per_iteration_counter(self) -> None:
        """Its token totals move when a request finishes; realtime_tokens every iteration."""
        registry = CollectorRegistry()
        finished = Counter("sglang:generation_tokens", "on finish", ["model_name"], registry=registry)
        finished_prompt = Counter("sglang:prompt_tokens", "on finish", ["model_name"], registry=registry)
        realtime = Counter(
            "sglang:realtime_tokens", "per iteration", ["model_name", "mode"], registry=registry
        )
        for mode in ("prefill_compute", "prefill_cache", "decode"):
            realtime.labels("m", mode)
        reader = EngineMetricsReader.from_registry(registry, flavor="sglang")
        before = reader.snapshot()
        realtime.labels("m", "decode").inc(300)
        realtime.labels("m", "prefill_compute").inc(70)
        realtime.labels("m", "prefill_cache").inc(30)
        finished.labels("m").inc(5)  # one short request finished; the long ones still run
        finished_prompt.labels("m").inc(9)
        delta = reader.delta(before, reader.snapshot())
        assert delta[GENERATION] == 300.0
        assert delta[PROMPT] == 100.0
        assert delta[HITS] == 30.0
        assert delta[EngineSeries("rl.engine.prefix_cache.queries")] == 100.0

    def test_without_the_per_iteration_counter_sglang_falls_back_to_its_totals(self) -> None:
        registry = CollectorRegistry()
        finished = Counter("sglang:generation_tokens", "on finish", ["model_name"], registry=registry)
        finished.labels("m")
        reader = EngineMetricsReader.from_registry(registry, flavor="sglang")
        before = reader.snapshot()
        finished.labels("m").inc(5)
        assert reader.delta(before, reader.snapshot())[GENERATION] == 5.0

    def test_sglang_flavor_reads_sglangs_names(self) -> None:
        registry = CollectorRegistry()
        prompt = Counter("sglang:prompt_tokens_total", "prefill", ["model_name"], registry=registry)
        cached = Counter("sglang:cached_tokens_total", "cached", ["model_name"], registry=registry)
        reader = EngineMetricsReader.from_registry(registry, flavor="sglang")
        before = reader.snapshot()
        prompt.labels("m").inc(100)
        cached.labels("m").inc(40)
        delta = reader.delta(before, reader.snapshot())
        assert delta[PROMPT] == 100.0
        assert delta[HITS] == 40.0
        assert delta[EngineSeries("rl.engine.prefix_cache.queries")] == 100.0


class TestHistograms:
    def test_delta_counts_each_bucket_and_the_sum_and_count(self) -> None:
        fake = FakeVllm()
        fake.ttft.labels("m", "0").observe(5.0)  # before the baseline: not in the delta
        reader = reader_for(fake)
        before = reader.snapshot()
        for value in (0.05, 0.5, 0.7, 3.0):
            fake.ttft.labels("m", "0").observe(value)
        hist = reader.delta(before, reader.snapshot())[TTFT]
        assert isinstance(hist, EngineHistogram)
        assert hist.bounds == (0.1, 1.0)
        assert hist.counts == (1.0, 2.0, 1.0)
        assert hist.count == 4.0
        assert hist.sum == pytest.approx(4.25)

    def test_histogram_reset_gives_the_new_state(self) -> None:
        old, restarted = FakeVllm(), FakeVllm()
        for value in (0.5, 0.5, 0.5):
            old.ttft.labels("m", "0").observe(value)
        restarted.ttft.labels("m", "0").observe(0.05)
        with pytest.warns(RlsightWarning, match="treated as a reset"):
            delta = EngineMetricsReader.delta(reader_for(old).snapshot(), reader_for(restarted).snapshot())
        hist = delta[TTFT]
        assert isinstance(hist, EngineHistogram)
        assert hist.counts == (1.0, 0.0, 0.0)
        assert hist.count == 1.0

    def test_engines_with_different_buckets_are_left_out_with_a_warning(self) -> None:
        registry = CollectorRegistry()
        registry.register(_StaticCollector(_two_engine_ttft(bounds_1=("0.5", "+Inf"))))
        snap = EngineMetricsReader.from_registry(registry, flavor="vllm").snapshot()
        with pytest.warns(RlsightWarning, match="different histogram buckets"):
            delta = EngineMetricsReader.delta(EngineSnapshot({}), snap)
        assert TTFT not in delta

    def test_engines_with_equal_buckets_are_summed(self) -> None:
        registry = CollectorRegistry()
        registry.register(_StaticCollector(_two_engine_ttft(bounds_1=("0.1", "+Inf"))))
        snap = EngineMetricsReader.from_registry(registry, flavor="vllm").snapshot()
        hist = EngineMetricsReader.delta(EngineSnapshot({}), snap)[TTFT]
        assert isinstance(hist, EngineHistogram)
        assert (hist.counts, hist.count, hist.sum) == ((2.0, 0.0), 2.0, 0.1)


class TestFailures:
    def test_collector_that_raises_gives_none_and_warns(self) -> None:
        registry = CollectorRegistry()
        registry.register(_RaisingCollector())
        reader = EngineMetricsReader.from_registry(registry, flavor="vllm")
        with pytest.warns(RlsightWarning, match="AssertionError"):
            assert reader.snapshot() is None

    def test_delta_against_a_failed_read_is_empty(self) -> None:
        fake = FakeVllm()
        assert EngineMetricsReader.delta(None, reader_for(fake).snapshot()) == {}
        assert EngineMetricsReader.delta(reader_for(fake).snapshot(), None) == {}

    def test_read_after_a_failure_starts_a_new_baseline_instead_of_a_stale_one(self) -> None:
        fake = FakeVllm()
        raising = _RaisingCollector(armed=False)
        fake.registry.register(raising)
        reader = reader_for(fake)
        assert reader.read_delta() == {}  # first read: the baseline
        fake.generate(10)
        assert reader.read_delta()[GENERATION] == 10.0
        fake.generate(1000)
        raising.armed = True
        with pytest.warns(RlsightWarning, match="next read starts a new baseline"):
            assert reader.read_delta() == {}
        raising.armed = False
        fake.generate(1)
        assert reader.read_delta() == {}  # no delta against the pre-failure baseline
        fake.generate(2)
        assert reader.read_delta()[GENERATION] == 2.0

    def test_mapped_series_with_an_unexpected_type_fails_the_read(self) -> None:
        registry = CollectorRegistry()
        Gauge("vllm:generation_tokens_total", "a gauge where a counter belongs", registry=registry)
        reader = EngineMetricsReader.from_registry(registry, flavor="vllm")
        with pytest.warns(RlsightWarning, match="expected 'counter'"):
            assert reader.snapshot() is None

    def test_unknown_flavor_name_raises_naming_the_built_in_ones(self) -> None:
        with pytest.raises(ValueError, match="vllm, sglang"):
            EngineMetricsReader.from_registry(CollectorRegistry(), flavor="trt")

    def test_custom_flavor_mapping_outside_the_vocabulary_raises(self) -> None:
        with pytest.raises(ValueError, match=r"unknown series 'rl\.engine\.tokens'"):
            EngineFlavor("mine", {"rl.engine.tokens": ("mine:tokens_total",)})


class TestCustomFlavor:
    def test_custom_flavor_maps_its_own_names(self) -> None:
        registry = CollectorRegistry()
        tokens = Counter("trt:output_tokens", "generated", registry=registry)
        flavor = EngineFlavor("trt", {"rl.engine.generation_tokens": ("trt:output_tokens_total",)})
        reader = EngineMetricsReader.from_registry(registry, flavor=flavor)
        before = reader.snapshot()
        tokens.inc(3)
        assert reader.delta(before, reader.snapshot()) == {GENERATION: 3.0}


@st.composite
def _counter_history(draw: st.DrawFn) -> list[tuple[str, int]]:
    return draw(
        st.lists(
            st.tuples(st.sampled_from(["inc", "inc", "inc", "reset"]), st.integers(0, 10_000)),
            min_size=1,
            max_size=20,
        )
    )


class TestDeltaProperties:
    @settings(max_examples=60, deadline=None)
    @given(_counter_history())
    def test_deltas_are_never_negative(self, history: list[tuple[str, int]]) -> None:
        for delta in _deltas_along(history):
            assert delta >= 0

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.integers(0, 10_000), min_size=1, max_size=20))
    def test_deltas_without_resets_sum_to_last_minus_first(self, increments: list[int]) -> None:
        history = [("inc", n) for n in increments]
        assert sum(_deltas_along(history)) == sum(increments[1:])


def _deltas_along(history: list[tuple[str, int]]) -> list[float]:
    """Apply each op to a real counter, snapshot after each, return successive deltas.

    A reset warns (once per process); these properties are about the values, so it is muted.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlsightWarning)
        return _deltas_along_loudly(history)


def _deltas_along_loudly(history: list[tuple[str, int]]) -> list[float]:
    holder = [FakeVllm()]
    reader = EngineMetricsReader(
        lambda: holder[0].registry.collect(), flavor="vllm", source="history"
    )
    snapshots = []
    for op, amount in history:
        if op == "reset":
            holder[0] = FakeVllm()
        holder[0].generate(amount)
        snapshots.append(reader.snapshot())
    return [
        float(reader.delta(a, b)[GENERATION]) for a, b in itertools.pairwise(snapshots)
    ]


class TestFromUrl:
    def test_scraped_text_gives_the_same_delta_as_the_registry(self) -> None:
        fake = FakeVllm()
        fake.generate(5)
        with _metrics_server(lambda: generate_latest(fake.registry)) as url:
            by_url = EngineMetricsReader.from_url(url, flavor="vllm")
            by_registry = reader_for(fake)
            before_url, before_reg = by_url.snapshot(), by_registry.snapshot()
            fake.generate(17)
            fake.success.labels("m", "0", "stop").inc(2)
            fake.ttft.labels("m", "0").observe(0.3)
            from_url = by_url.delta(before_url, by_url.snapshot())
            from_registry = by_registry.delta(before_reg, by_registry.snapshot())
        assert from_url == from_registry
        assert from_url[GENERATION] == 17.0

    def test_server_that_stalls_past_the_timeout_gives_an_empty_delta(self) -> None:
        fake = FakeVllm()
        stall = threading.Event()

        def body() -> bytes:
            return generate_latest(fake.registry)

        with _metrics_server(body, stall=stall) as url:
            reader = EngineMetricsReader.from_url(url, flavor="vllm", timeout_s=0.3)
            assert reader.read_delta() == {}  # baseline
            stall.set()
            fake.generate(10)
            with pytest.warns(RlsightWarning, match="TimeoutError"):
                assert reader.read_delta() == {}
            stall.clear()
            _wait_for_scrape_threads_to_end()
            assert reader.read_delta() == {}  # new baseline after the failure
            fake.generate(4)
            assert reader.read_delta()[GENERATION] == 4.0

    def test_server_that_trickles_past_the_timeout_gives_an_empty_delta(self) -> None:
        """Each chunk beats the socket timeout, so only the overall deadline can stop it."""
        fake = FakeVllm()
        with _metrics_server(lambda: generate_latest(fake.registry), trickle=True) as url:
            reader = EngineMetricsReader.from_url(url, flavor="vllm", timeout_s=0.3)
            with pytest.warns(RlsightWarning, match="TimeoutError"):
                assert reader.snapshot() is None

    def test_http_error_status_fails_the_read(self) -> None:
        with _metrics_server(lambda: b"", status=503) as url:
            reader = EngineMetricsReader.from_url(url, flavor="vllm")
            with pytest.warns(RlsightWarning, match="HTTPError"):
                assert reader.snapshot() is None

    def test_an_http_error_leaves_no_socket_open(self) -> None:
        """The error response's socket is closed, not left for the garbage collector."""
        import gc

        with _metrics_server(lambda: b"", status=503) as url:
            reader = EngineMetricsReader.from_url(url, flavor="vllm")
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                assert reader.snapshot() is None
                gc.collect()
        assert [w for w in seen if issubclass(w.category, ResourceWarning)] == []

    def test_unreachable_server_fails_the_read(self) -> None:
        with _metrics_server(lambda: b"") as url:
            pass  # the server is gone once the block ends
        reader = EngineMetricsReader.from_url(url, flavor="vllm", timeout_s=1.0)
        with pytest.warns(RlsightWarning, match="URLError"):
            assert reader.snapshot() is None


class TestRecordEngineDeltas:
    def test_counter_deltas_carry_step_engine_and_finish_reason(self) -> None:
        fake = FakeVllm()
        reader = reader_for(fake)
        before = reader.snapshot()
        fake.generate(12)
        fake.success.labels("m", "0", "length").inc(3)
        with capture_telemetry() as cap:
            record_engine_deltas(5, reader.delta(before, reader.snapshot()), engine="gen/0")
            got = {(p.name, p.attributes.get("rl.engine.finish_reason")): (p.value, p.attributes)
                   for p in cap.metrics()}
        assert got[("rl.engine.generation_tokens", None)] == (
            12.0, {"rl.step": 5, "rl.engine.name": "gen/0"})
        value, attrs = got[("rl.engine.request.success", "length")]
        assert value == 3.0 and attrs["rl.step"] == 5

    def test_histogram_delta_becomes_count_sum_and_cumulative_buckets(self) -> None:
        fake = FakeVllm()
        reader = reader_for(fake)
        before = reader.snapshot()
        for value in (0.05, 0.5, 3.0):
            fake.ttft.labels("m", "0").observe(value)
        with capture_telemetry() as cap:
            record_engine_deltas(1, reader.delta(before, reader.snapshot()), engine="gen/0")
            points = cap.metrics()
        by_name = {p.name: p.value for p in points if not p.name.endswith(".bucket")}
        assert by_name["rl.engine.time_to_first_token.count"] == 3.0
        assert by_name["rl.engine.time_to_first_token.sum"] == pytest.approx(3.55)
        buckets = {p.attributes["rl.engine.le"]: p.value for p in points
                   if p.name == "rl.engine.time_to_first_token.bucket"}
        assert buckets == {"0.1": 1.0, "1.0": 2.0, "+Inf": 3.0}

    def test_engine_deltas_reach_the_store_with_their_attributes(self, tmp_path: Path) -> None:
        fake = FakeVllm()
        reader = reader_for(fake)
        with capture_telemetry(run_dir=tmp_path):
            reader.read_delta()
            fake.generate(7)
            record_engine_deltas(3, reader.read_delta(), engine="gen/1")
        (point,) = [p for p in read_metrics(tmp_path).points
                    if p.name == "rl.engine.generation_tokens"]
        assert point.value == 7.0
        assert point.attributes == {"rl.step": 3, "rl.engine.name": "gen/1"}

    def test_without_telemetry_recording_deltas_is_a_no_op(self) -> None:
        fake = FakeVllm()
        reader = reader_for(fake)
        before = reader.snapshot()
        fake.generate(1)
        record_engine_deltas(1, reader.delta(before, reader.snapshot()), engine="gen/0")
        with capture_telemetry() as cap:
            assert cap.metrics() == []


# -- helpers --------------------------------------------------------------------------------


class _RaisingCollector:
    """A collector that fails the way vLLM's snapshot reader does on an unknown type."""

    def __init__(self, *, armed: bool = True) -> None:
        self.armed = armed

    def collect(self) -> list[Metric]:
        if self.armed:
            raise AssertionError("Unknown metric type untyped")
        return []

    def describe(self) -> list[Metric]:
        return []


class _StaticCollector:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families

    def describe(self) -> list[Metric]:
        return []


def _two_engine_ttft(bounds_1: tuple[str, ...]) -> list[Metric]:
    family = Metric("vllm:time_to_first_token_seconds", "ttft", "histogram")
    for engine, bounds in (("0", ("0.1", "+Inf")), ("1", bounds_1)):
        for le in bounds:
            family.add_sample(
                "vllm:time_to_first_token_seconds_bucket", {"engine": engine, "le": le}, 1.0
            )
        family.add_sample("vllm:time_to_first_token_seconds_count", {"engine": engine}, 1.0)
        family.add_sample("vllm:time_to_first_token_seconds_sum", {"engine": engine}, 0.05)
    return [family]


@contextmanager
def _metrics_server(
    body: Callable[[], bytes],
    *,
    status: int = 200,
    stall: threading.Event | None = None,
    trickle: bool = False,
) -> Iterator[str]:
    """Serve ``body()`` at http://127.0.0.1:<free port>/metrics from a thread's event loop.

    ``stall`` set: requests wait until it is cleared. ``trickle``: the body goes out a byte
    every 50 ms, for at most 3 s.
    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    closing = threading.Event()
    state: dict[str, object] = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        while stall is not None and stall.is_set():  # hold the request until the test lets go
            await asyncio.sleep(0.05)
        if not trickle:
            return web.Response(body=body(), status=status, content_type="text/plain")
        response = web.StreamResponse(status=status, headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for byte in body()[:60]:
            if closing.is_set():
                break
            await response.write(bytes([byte]))
            await asyncio.sleep(0.05)
        return response

    async def start() -> None:
        app = web.Application()
        app.router.add_get("/metrics", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        state["runner"] = runner
        state["port"] = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{state['port']}/metrics"
    finally:
        closing.set()
        runner = state["runner"]
        assert isinstance(runner, web.AppRunner)
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()



#: Nothing listens at these tests' endpoints: a short shutdown, not the exporter's retries.
_NO_COLLECTOR: dict[str, int] = {"shutdown_timeout_ms": 200}


class TestNativeTracingEnv:
    """native_tracing_env: engine spans join the run only when the run asks for them."""

    def test_empty_unless_the_setting_the_group_and_an_endpoint_are_all_on(self) -> None:
        from rlsight.engines import native_tracing_env
        from rlsight.testing import capture_telemetry

        with capture_telemetry(span_groups=("all",), otlp_endpoint=None, engine_native_tracing=True):
            assert native_tracing_env() == {}
        with capture_telemetry(span_groups=("per_step",), engine_native_tracing=True,
                               otlp_endpoint="http://127.0.0.1:4318", **_NO_COLLECTOR):
            assert native_tracing_env() == {}
        with capture_telemetry(span_groups=("all",), engine_native_tracing=False,
                               otlp_endpoint="http://127.0.0.1:4318", **_NO_COLLECTOR):
            assert native_tracing_env() == {}

    def test_sets_the_traces_specific_protocol_vllm_reads(self) -> None:
        from rlsight.engines import native_tracing_env
        from rlsight.testing import capture_telemetry

        with capture_telemetry(span_groups=("all",), engine_native_tracing=True, run_id="r1",
                               otlp_endpoint="http://127.0.0.1:4318/", **_NO_COLLECTOR):
            env = native_tracing_env(worker_group="gen")
        assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "http://127.0.0.1:4318/v1/traces"
        assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
        assert "rl.run.id=r1" in env["OTEL_RESOURCE_ATTRIBUTES"]
        assert "rl.worker_group=gen" in env["OTEL_RESOURCE_ATTRIBUTES"]
        with capture_telemetry(span_groups=("all",), engine_native_tracing=True,
                               otlp_endpoint="http://127.0.0.1:4317", otlp_protocol="grpc", **_NO_COLLECTOR):
            env = native_tracing_env()
        assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "http://127.0.0.1:4317"
        assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "grpc"


def test_record_engine_deltas_skips_a_series_outside_the_vocabulary_without_raising() -> None:
    with capture_telemetry() as cap:
        with pytest.warns(RlsightWarning, match="my.series"):
            record_engine_deltas(1, {EngineSeries("my.series"): 1.0}, engine="g")
        assert [p for p in cap.metrics() if p.name == "my.series"] == []


def _scrape_threads() -> int:
    return sum(t.name == "rlsight-engine-scrape" and t.is_alive() for t in threading.enumerate())


def _wait_for_scrape_threads_to_end(limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while _scrape_threads():
        assert time.monotonic() < deadline, "a scrape thread outlived the server's answer"
        time.sleep(0.02)


class TestEnginesAsTheyAreToday:
    """Series vLLM 0.33 and SGLang 0.5 expose beyond tokens: levels, spec decode, latencies."""

    def test_vllm_gauges_are_levels_summed_or_maxed_over_engines(self) -> None:
        registry = CollectorRegistry()
        running = Gauge("vllm:num_requests_running", "running", LABELS, registry=registry)
        waiting = Gauge("vllm:num_requests_waiting", "waiting", LABELS, registry=registry)
        usage = Gauge("vllm:kv_cache_usage_perc", "kv", LABELS, registry=registry)
        for engine, (r, w, u) in {"0": (8, 2, 0.25), "1": (6, 0, 0.75)}.items():
            running.labels("m", engine).set(r)
            waiting.labels("m", engine).set(w)
            usage.labels("m", engine).set(u)
        reader = EngineMetricsReader.from_registry(registry, flavor="vllm")
        before = reader.snapshot()
        running.labels("m", "0").set(10)
        delta = reader.delta(before, reader.snapshot())
        assert delta[EngineSeries("rl.engine.requests.running")] == 16.0  # a level, not 10 - 8
        assert delta[EngineSeries("rl.engine.requests.waiting")] == 2.0
        assert delta[EngineSeries("rl.engine.kv_cache.usage")] == 0.75  # the fullest engine

    def test_vllm_spec_decode_e2e_latency_and_iteration_tokens_are_mapped(self) -> None:
        registry = CollectorRegistry()
        drafts = Counter("vllm:spec_decode_num_draft_tokens", "d", LABELS, registry=registry)
        accepted = Counter("vllm:spec_decode_num_accepted_tokens", "a", LABELS, registry=registry)
        e2e = Histogram("vllm:e2e_request_latency_seconds", "e2e", LABELS, buckets=[1.0, 10.0],
                        registry=registry)
        iteration = Histogram("vllm:iteration_tokens_total", "it", LABELS, buckets=[64, 512],
                              registry=registry)
        for metric in (drafts, accepted, e2e, iteration):
            metric.labels("m", "0")
        reader = EngineMetricsReader.from_registry(registry, flavor="vllm")
        before = reader.snapshot()
        drafts.labels("m", "0").inc(40)
        accepted.labels("m", "0").inc(28)
        e2e.labels("m", "0").observe(4.0)
        iteration.labels("m", "0").observe(300)
        delta = reader.delta(before, reader.snapshot())
        assert delta[EngineSeries("rl.engine.spec_decode.draft_tokens")] == 40.0
        assert delta[EngineSeries("rl.engine.spec_decode.accepted_tokens")] == 28.0
        latency = delta[EngineSeries("rl.engine.e2e_latency")]
        assert isinstance(latency, EngineHistogram) and latency.counts == (0.0, 1.0, 0.0)
        tokens = delta[EngineSeries("rl.engine.iteration_tokens")]
        assert isinstance(tokens, EngineHistogram) and tokens.counts == (0.0, 1.0, 0.0)

    def test_sglang_levels_and_acceptance_rate_are_mapped(self) -> None:
        registry = CollectorRegistry()
        names = {
            "sglang:num_running_reqs": ("rl.engine.requests.running", 12.0),
            "sglang:num_queue_reqs": ("rl.engine.requests.waiting", 3.0),
            "sglang:token_usage": ("rl.engine.kv_cache.usage", 0.5),
            "sglang:spec_accept_rate": ("rl.engine.spec_decode.acceptance_rate", 0.7),
        }
        for name, (_, value) in names.items():
            Gauge(name, name, ["model_name"], registry=registry).labels("m").set(value)
        reader = EngineMetricsReader.from_registry(registry, flavor="sglang")
        delta = reader.delta(reader.snapshot(), reader.snapshot())
        assert {s.name: v for s, v in delta.items()} == dict(names.values())

    def test_gauges_are_recorded_as_gauges_with_their_level(self) -> None:
        with capture_telemetry() as cap:
            record_engine_deltas(3, {EngineSeries("rl.engine.kv_cache.usage"): 0.9}, engine="gen/0")
            (point,) = [p for p in cap.metrics() if p.name == "rl.engine.kv_cache.usage"]
        assert point.value == 0.9
        assert point.attributes["rl.step"] == 3

    def test_a_read_that_finds_none_of_the_flavors_series_warns_once(self) -> None:
        """vLLM's offline LLM(...) keeps no stats by default: say how to turn them on."""
        reader = EngineMetricsReader.from_registry(CollectorRegistry(), flavor="vllm")
        with pytest.warns(RlsightWarning, match="disable_log_stats=False") as seen:
            reader.read_delta()
            reader.read_delta()
        assert len(seen) == 1

    def test_non_monotonic_buckets_are_left_out_with_a_warning_then_count_as_reset(self) -> None:
        family = Metric("vllm:time_to_first_token_seconds", "ttft", "histogram")
        for le, count in (("0.1", 5.0), ("1.0", 3.0), ("+Inf", 6.0)):  # 5 then 3: impossible
            family.add_sample("vllm:time_to_first_token_seconds_bucket", {"le": le}, count)
        family.add_sample("vllm:time_to_first_token_seconds_count", {}, 6.0)
        family.add_sample("vllm:time_to_first_token_seconds_sum", {}, 1.0)
        good = FakeVllm()
        good.ttft.labels("m", "0").observe(0.05)
        registry = CollectorRegistry()
        registry.register(_StaticCollector([family]))
        with pytest.warns(RlsightWarning, match="decrease along le"):
            broken = EngineMetricsReader.from_registry(registry, flavor="vllm").snapshot()
        assert broken is not None and TTFT not in {k.series for k in broken.values}
        after = reader_for(good).snapshot()
        hist = EngineMetricsReader.delta(broken, after)[TTFT]
        assert isinstance(hist, EngineHistogram) and min(hist.counts) >= 0

    def test_a_negative_counter_sample_is_left_out(self) -> None:
        family = Metric("vllm:generation_tokens", "gen", "counter")
        family.add_sample("vllm:generation_tokens_total", {}, -4.0)
        registry = CollectorRegistry()
        registry.register(_StaticCollector([family]))
        with pytest.warns(RlsightWarning, match="is negative"):
            snapshot = EngineMetricsReader.from_registry(registry, flavor="vllm").snapshot()
        assert snapshot is not None and dict(snapshot.values) == {}


class TestScrapeThreads:
    def test_a_dribbling_endpoint_holds_at_most_one_thread_and_it_gives_up(self) -> None:
        """A server sending a byte every 20 ms forever: each chunk beats the socket timeout."""
        import socket

        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        stop = threading.Event()

        def serve() -> None:
            conns = []
            listener.settimeout(0.05)
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
                    conns.append(conn)
                except TimeoutError:
                    pass
                for conn in list(conns):
                    try:
                        conn.sendall(b"#")
                    except OSError:
                        conns.remove(conn)
                        conn.close()
                time.sleep(0.02)
            for conn in conns:
                conn.close()

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
        try:
            reader = EngineMetricsReader.from_url(url, flavor="vllm", timeout_s=0.3)
            with pytest.warns(RlsightWarning, match="TimeoutError"):
                for _ in range(5):
                    assert reader.read_delta() == {}
                    assert _scrape_threads() <= 1
            _wait_for_scrape_threads_to_end()  # while the server still dribbles
        finally:
            stop.set()
            server.join(5)
            listener.close()
