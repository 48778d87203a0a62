"""`prometheus_port`: a real Prometheus server scrapes the driver and its query API reads back
the goodput, a teed trainer scalar and the engine-style counters, without the `rl.step` label."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rlsight
from rlsight import RL, ConfigError, MetricSpec
from rlsight.dashboards import BUSY, PANELS, RATE, fleet_utilisation, grafana_dashboard
from rlsight.engines import EngineMetricsReader, record_engine_deltas
from rlsight.step_summary import PROCESS_SECONDS
from rlsight.store import read_metrics
from rlsight.testing import isolated_metric_groups

pytestmark = pytest.mark.prometheus

_SPECS = [
    MetricSpec("prom_test.loss", "prom_test/loss", "gauge", "1", "Loss (Prometheus test)."),
    MetricSpec("prom_test.samples", "prom_test/samples", "counter", "{sample}", "Samples (test)."),
]


@pytest.fixture
def trainer_group() -> Iterator[None]:
    """The test's metric group, forgotten afterwards (the tee records every registered group)."""
    with isolated_metric_groups():
        rlsight.register_metric_group("prom_test_trainer", _SPECS)
        yield


class _VllmLike:
    """vLLM's generation token counter in a registry of its own (the engine runs in the driver)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter

        self.registry = CollectorRegistry()
        self.tokens = Counter("vllm:generation_tokens", "Generation tokens.", ["model_name"],
                              registry=self.registry)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


class _Prometheus:
    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, promql: str) -> list[dict[str, Any]]:
        doc = _get(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])

    def wait_for(self, promql: str, expected: float, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """Poll until the query's single series has ``expected`` (a scrape after the last step)."""
        deadline = time.monotonic() + timeout_s
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if len(result) == 1 and float(result[0]["value"][1]) == pytest.approx(expected):
                return result
            time.sleep(0.3)
        raise AssertionError(f"{promql}: expected {expected}, Prometheus has {result}")


def _prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        pytest.fail("Debian's prometheus is needed for this test: `make prometheus` "
                    "(apt-get install -y prometheus)")
    return found


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[_Prometheus, int]]:
    """A Prometheus server on 127.0.0.1 that scrapes 127.0.0.1:<target port> every 0.5 s."""
    target, listen = _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
        f"scrape_configs:\n  - job_name: rlsight\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target}']\n"
    )
    proc = subprocess.Popen(
        [_prometheus_binary(), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{listen}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{listen}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"prometheus did not start: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.1)
        yield _Prometheus(base), target
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_real_prometheus_reads_goodput_and_teed_scalars(prometheus, trainer_group, tmp_path):
    prom, port = prometheus
    config = rlsight.TelemetryConfig(run_dir=str(tmp_path / "run"), strict=True, span_groups=("all",),
                                     prometheus_port=port)
    summaries = []
    engine = _VllmLike()
    reader = EngineMetricsReader.from_registry(engine.registry, flavor="vllm")
    reader.read_delta()
    with rlsight.setup_telemetry(config) as telemetry:
        assert telemetry.prometheus_address == ("127.0.0.1", port)
        for step in range(1, 4):
            with rlsight.step_span(step):
                with rlsight.span(RL.GENERATION, "rl.rollout.generate"):
                    time.sleep(0.01)
                    engine.tokens.labels("m").inc(100)
                with rlsight.span(RL.REFIT, "rl.refit.push_weights"):
                    time.sleep(0.003)
                with rlsight.efficiency_span("idle/buffer_starvation"):
                    time.sleep(0.005)
            summaries.append(rlsight.last_step_summary())
            rlsight.tee_step_metrics(step, {"prom_test/loss": 1.0 / step, "prom_test/samples": 8})
            record_engine_deltas(step, reader.read_delta(), engine="generation/0")
            rlsight.flush_telemetry()  # closes a busy-time window (rl.goodput.process.seconds)
            # Each step's total scraped before the next step, so rate() and increase() see
            # the counters move.
            prom.wait_for('rl_goodput_seconds_total{rl_bucket="idle"}',
                          sum(s["rlsight/idle_s"] for s in summaries))
        idle = sum(s["rlsight/idle_s"] for s in summaries)
        prom.wait_for('rl_goodput_seconds_total{rl_bucket="idle"}', idle)
        prom.wait_for('rl_goodput_contributor_seconds_total{rl_contributor="idle/buffer_starvation"}', idle)
        prom.wait_for("rl_goodput_pct_percent", summaries[-1]["rlsight/goodput_pct"])
        # A gauge keeps its latest step's value; a counter adds up over steps.
        prom.wait_for('prom_test_loss{rl_window="step"}', 1.0 / 3)
        prom.wait_for("prom_test_samples_total", 24.0)
        productive = prom.query('rl_goodput_seconds_total{rl_bucket="productive"}')
        expected = sum(s["rlsight/productive_s"] for s in summaries)
        assert float(productive[0]["value"][1]) == pytest.approx(expected)
        assert prom.query('{__name__=~"rl_.*|prom_test_.*", rl_step!=""}') == []
        assert prom.query('up{job="rlsight"}')[0]["value"][1] == "1"
        prom.wait_for('rl_engine_generation_tokens_total{rl_engine_name="generation/0"}', 300.0)
        # Every panel of docs/dashboards.md and of the Grafana dashboard reads data here.
        exprs = [t["expr"] for p in grafana_dashboard()["panels"] for t in p["targets"]]
        assert exprs == [p.expr for p in PANELS]
        for expr in exprs:
            assert prom.query(expr.replace(RATE, "1m")), expr
        # Fleet utilisation: the endpoint serves the driver's own busy time; Prometheus's
        # figure for the run so far is the one the store's metric lines give.
        rlsight.flush_telemetry()
        seconds: dict[str, float] = {}
        for p in read_metrics(tmp_path / "run").points:
            if p.name == PROCESS_SECONDS:
                assert (p.attributes["rl.worker_group"], p.attributes["rl.rank"]) == ("driver", 0)
                bucket = str(p.attributes["rl.bucket"])
                seconds[bucket] = seconds.get(bucket, 0.0) + float(p.value or 0)
        busy = sum(seconds[b] for b in BUSY)
        assert busy > 0.035 and seconds["idle"] > 0.01  # 3 x (10 + 3 ms) busy, 3 x 5 ms idle
        prom.wait_for(fleet_utilisation(None), busy / sum(seconds.values()))
        (live,) = prom.query(fleet_utilisation("1m"))
        assert live["metric"]["rl_worker_group"] == "driver" and 0 < float(live["value"][1]) < 1
        shares = prom.query(PANELS[0].expr.replace(RATE, "1m"))
        assert {r["metric"]["rl_bucket"] for r in shares} == {
            "productive", "overhead", "idle", "wasted", "unattributed"}
        assert sum(float(r["value"][1]) for r in shares) == pytest.approx(1.0)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_the_endpoint_binds_loopback_by_default(tmp_path):
    config = rlsight.TelemetryConfig(run_dir=str(tmp_path / "run"), strict=True, prometheus_port=0)
    with rlsight.setup_telemetry(config) as telemetry:
        assert telemetry.prometheus_address is not None
        host, port = telemetry.prometheus_address
        assert host == "127.0.0.1" and port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert resp.status == 200


def test_a_taken_port_is_a_config_error_at_setup(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = rlsight.TelemetryConfig(run_dir=str(tmp_path / "run"), prometheus_port=port)
        with pytest.raises(ConfigError, match=f"prometheus_port={port}: cannot listen on 127.0.0.1:{port}"):
            rlsight.setup_telemetry(config)
    assert rlsight.last_step_summary() == {}
    assert not (tmp_path / "run").exists()  # no run left for `rlsight runs` to list


def test_a_host_that_cannot_be_bound_is_a_config_error_naming_the_host(tmp_path):
    host = "192.0.2.1"  # TEST-NET-1 (RFC 5737): never an address of this machine
    earlier = tmp_path / "run" / "traces" / "driver-0-1.jsonl"  # a restart into a run that ran
    earlier.parent.mkdir(parents=True)
    earlier.write_text("{}\n")
    config = rlsight.TelemetryConfig(run_dir=str(tmp_path / "run"), prometheus_port=0, prometheus_host=host)
    with pytest.raises(ConfigError, match=rf"^TelemetryConfig.prometheus_host='{host}': cannot listen on "
                                          rf".*; use an address of this machine"):
        rlsight.setup_telemetry(config)
    assert rlsight.last_step_summary() == {}
    assert earlier.read_text() == "{}\n"  # a folder the failed setup did not make is kept


def test_the_port_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RLSIGHT_PROMETHEUS_PORT", "0")
    monkeypatch.setenv("RLSIGHT_RUN_DIR", str(tmp_path / "run"))
    with rlsight.setup_telemetry() as telemetry:
        assert telemetry.prometheus_address is not None


def test_workers_never_serve(tmp_path):
    env = rlsight.TelemetryConfig(run_dir=str(tmp_path / "run"), prometheus_port=0).to_env()
    worker = rlsight.init_worker(environ=env)
    assert worker is not None
    try:
        with rlsight.span(RL.TRAINING, "rl.train.policy"):
            pass
        assert worker.prometheus_address is None
    finally:
        rlsight.shutdown_telemetry()


@pytest.mark.parametrize("bad", [-1, 65536, True, "9464"])
def test_a_port_outside_0_to_65535_is_refused(bad):
    with pytest.raises(ConfigError, match="prometheus_port"):
        rlsight.TelemetryConfig(prometheus_port=bad)


def test_every_scrape_serves_run_totals_even_when_nothing_changed():
    """Delta collections folded into totals: a second scrape with no new step still serves
    every series (Prometheus would mark a missing one stale), with unchanged values."""
    from opentelemetry.sdk.metrics import MeterProvider

    from rlsight._prometheus import PrometheusEndpoint

    endpoint = PrometheusEndpoint("127.0.0.1", 0)
    provider = MeterProvider(metric_readers=[endpoint.reader])
    try:
        meter = provider.get_meter("t")
        counter = meter.create_counter("t.seconds", "s")
        gauge = meter.create_gauge("t.pct", "%")
        histogram = meter.create_histogram("t.len", "{token}", explicit_bucket_boundaries_advisory=[1, 10])

        def scrape() -> dict[str, str]:
            url = f"http://127.0.0.1:{endpoint.port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as resp:
                lines = resp.read().decode().splitlines()
            return {line.split("{")[0]: line.rsplit(" ", 1)[1] for line in lines
                    if line.startswith("t_") and "rl_step" not in line and 'le="10.0"' not in line
                    and 'le="1.0"' not in line}

        for step in (1, 2):
            counter.add(1.5, {"rl.step": step})
            gauge.set(10.0 * step, {"rl.step": step})
            histogram.record(5, {"rl.step": step})
        first = scrape()
        assert first["t_seconds_total"] == "3.0" and first["t_pct_percent"] == "20.0"
        assert first["t_len_count"] == "2.0" and first["t_len_sum"] == "10.0"
        assert scrape() == first
        counter.add(1.0, {"rl.step": 3})
        assert scrape()["t_seconds_total"] == "4.0"
    finally:
        provider.shutdown()
        endpoint.close()
