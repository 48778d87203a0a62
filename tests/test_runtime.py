"""The telemetry lifecycle (rlsight.runtime): setup, identity, init_worker, bounded shutdown."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlsight._setup import init_worker, setup_telemetry
from rlsight._span_manager import NOOP
from rlsight.config import TelemetryConfig
from rlsight.errors import ConfigError, RlsightWarning, TelemetryStateError
from rlsight.groups import is_span_group_enabled
from rlsight.runtime import ShutdownReport, active_runtime, shutdown_telemetry
from rlsight.spans import span
from rlsight.store import read_manifest, read_spans


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No inherited RLSIGHT_/OTEL_ variables, and nothing left set up after the test."""
    for var in list(os.environ):
        if var.startswith(("RLSIGHT_", "OTEL_")) or var == "SLURM_JOB_ID":
            monkeypatch.delenv(var)
    assert active_runtime() is None
    yield
    shutdown_telemetry(timeout_ms=2000)


def _config(run_dir: Path, **overrides: Any) -> TelemetryConfig:
    overrides.setdefault("span_groups", ("all",))
    return TelemetryConfig(run_id="run-1", run_dir=str(run_dir), **overrides)


def _stored_resource(run_dir: Path) -> dict[str, Any]:
    spans = read_spans(run_dir).spans
    assert spans, "expected at least one stored span"
    return dict(spans[0].resource)


class TestSettingsPrecedence:
    """setup_telemetry(TelemetryConfig(...)) honours explicit > RLSIGHT_* > OTEL_* > default (#9.2)."""

    def test_rlsight_enabled_false_turns_a_code_config_off(
        self, run_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RLSIGHT_ENABLED", "false")
        telemetry = setup_telemetry(TelemetryConfig(run_id="r", run_dir=str(run_dir)))
        assert not telemetry.config.enabled and active_runtime() is None
        assert span("training", "rl.test.off") is NOOP

    def test_rlsight_span_groups_narrow_a_code_config(
        self, run_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RLSIGHT_SPAN_GROUPS", "minimal")
        setup_telemetry(TelemetryConfig(run_id="r", run_dir=str(run_dir)))
        assert is_span_group_enabled("step") and not is_span_group_enabled("training")

    def test_otel_service_name_does_not_replace_an_explicit_one(
        self, run_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("OTEL_SERVICE_NAME", "theirs")
        telemetry = setup_telemetry(_config(run_dir, service_name="mine"))
        assert telemetry.config.service_name == "mine"

    def test_http_json_without_a_collector_sets_up(
        self, run_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        telemetry = setup_telemetry(_config(run_dir))
        assert telemetry.config.otlp_protocol == "http/json"

    def test_a_metrics_only_endpoint_builds_no_span_exporter(
        self, run_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://127.0.0.1:9/v1/metrics")
        # Nothing listens on port 9: a short shutdown instead of the exporter's retries.
        telemetry = setup_telemetry(_config(run_dir, shutdown_timeout_ms=200))
        assert [p.name for p in telemetry._processors] == ["store"]


class TestSetup:
    def test_setup_activates_the_gate_with_the_configs_spec(self, run_dir: Path) -> None:
        telemetry = setup_telemetry(_config(run_dir, span_groups=("minimal",)))
        assert active_runtime() is telemetry
        assert is_span_group_enabled("step") and not is_span_group_enabled("generation")

    def test_second_setup_is_a_clear_error(self, run_dir: Path) -> None:
        setup_telemetry(_config(run_dir))
        with pytest.raises(TelemetryStateError, match=r"already set up.*shutdown_telemetry"):
            setup_telemetry(_config(run_dir))

    def test_setup_after_shutdown_is_allowed(self, run_dir: Path) -> None:
        setup_telemetry(_config(run_dir)).shutdown()
        second = setup_telemetry(_config(run_dir))
        assert active_runtime() is second

    def test_disabled_config_sets_nothing_up(self, run_dir: Path) -> None:
        telemetry = setup_telemetry(_config(run_dir, enabled=False))
        assert active_runtime() is None
        assert not telemetry.materialized
        assert span("generation", "rl.test.off") is NOOP
        assert not run_dir.exists()

    def test_unwritable_run_dir_is_a_config_error(self, tmp_path: Path) -> None:
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        with pytest.raises(ConfigError, match=r"run_dir.*not writable"):
            setup_telemetry(_config(blocker / "run"))
        assert active_runtime() is None

    def test_setup_reads_the_environment_when_given_no_config(
        self, run_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for key, value in _config(run_dir, algorithm="ppo").to_env().items():
            monkeypatch.setenv(key, value)
        telemetry = setup_telemetry()
        assert telemetry.config.algorithm == "ppo" and telemetry.config.run_id == "run-1"

    def test_telemetry_as_context_manager_shuts_down(self, run_dir: Path) -> None:
        with setup_telemetry(_config(run_dir)):
            assert active_runtime() is not None
        assert active_runtime() is None
        assert not is_span_group_enabled("generation")


class TestManifest:
    def test_manifest_records_config_versions_and_start_time(self, run_dir: Path) -> None:
        telemetry = setup_telemetry(_config(run_dir, algorithm="grpo"))
        manifest = read_manifest(run_dir)
        assert manifest is not None
        assert manifest["run_id"] == "run-1"
        assert manifest["config"]["algorithm"] == "grpo"
        assert manifest["config"]["span_groups"] == ["all"]
        assert manifest["started_unix_ns"] == telemetry.started_ns
        assert manifest["versions"]["rlsight"] and manifest["versions"]["opentelemetry-sdk"]
        assert manifest["versions"]["python"]
        assert manifest["store_format"] == 1

    def test_no_manifest_without_the_local_store(self, run_dir: Path) -> None:
        setup_telemetry(_config(run_dir, local_store=False))
        assert read_manifest(run_dir) is None


class TestResource:
    def test_driver_resource_attributes_follow_the_design(self, run_dir: Path) -> None:
        telemetry = setup_telemetry(_config(run_dir, algorithm="grpo", service_name="trainer"))
        attrs = telemetry.resource_attributes
        pid = os.getpid()
        assert attrs["service.name"] == "trainer"
        assert attrs["service.instance.id"] == f"run-1/driver/0/{pid}"
        assert attrs["rl.run.id"] == "run-1"
        assert attrs["rl.rank"] == 0 and attrs["rl.world_size"] == 1
        assert attrs["rl.worker_group"] == "driver"
        assert attrs["rl.stage"] == "rl"
        assert attrs["rl.algorithm"] == "grpo"
        assert attrs["process.pid"] == pid
        assert attrs["host.name"] == socket.gethostname()

    def test_emitted_spans_carry_the_resource(self, run_dir: Path) -> None:
        setup_telemetry(_config(run_dir), worker_group="trainer", rank=2, world_size=4)
        with span("training", "rl.test.train"):
            pass
        shutdown_telemetry()
        resource = _stored_resource(run_dir)
        assert resource["service.instance.id"] == f"run-1/trainer/2/{os.getpid()}"
        assert (resource["rl.rank"], resource["rl.world_size"]) == (2, 4)

    def test_no_algorithm_attribute_when_unknown(self, run_dir: Path) -> None:
        assert "rl.algorithm" not in setup_telemetry(_config(run_dir)).resource_attributes

    def test_explicit_resource_attributes_win_over_detected_ones(self, run_dir: Path) -> None:
        config = _config(run_dir, resource_attributes={"host.name": "from-config", "team": "rl"})
        telemetry = setup_telemetry(config, resource_attributes={"rl.stage": "eval", "team": "call"})
        attrs = telemetry.resource_attributes
        assert attrs["host.name"] == "from-config"
        assert attrs["rl.stage"] == "eval"
        assert attrs["team"] == "call"

    def test_devices_come_from_the_environment(self, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("RLSIGHT_DEVICES", "8")
        assert setup_telemetry(_config(run_dir)).resource_attributes["rl.devices"] == 8

    def test_identity_comes_from_the_environment_like_a_launcher_sets_it(
        self, run_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Issue #18: every launcher-started process that called setup_telemetry was driver/0/1."""
        monkeypatch.setenv("RLSIGHT_WORKER_GROUP", "trainer")
        monkeypatch.setenv("RLSIGHT_RANK", "3")
        monkeypatch.setenv("RLSIGHT_WORLD_SIZE", "8")
        attrs = setup_telemetry(_config(run_dir)).resource_attributes
        assert (attrs["rl.worker_group"], attrs["rl.rank"], attrs["rl.world_size"]) == ("trainer", 3, 8)

    def test_identity_arguments_win_over_the_environment(
        self, run_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RLSIGHT_WORKER_GROUP", "trainer")
        monkeypatch.setenv("RLSIGHT_RANK", "3")
        telemetry = setup_telemetry(_config(run_dir), worker_group="driver", rank=0, world_size=2)
        assert (telemetry.worker_group, telemetry.rank) == ("driver", 0)
        assert telemetry.resource_attributes["rl.world_size"] == 2

    def test_a_bad_rank_variable_is_a_config_error_naming_it(
        self, run_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RLSIGHT_RANK", "three")
        with pytest.raises(ConfigError, match="RLSIGHT_RANK='three'"):
            setup_telemetry(_config(run_dir))

    def test_store_file_names_replace_unsafe_characters(self, run_dir: Path) -> None:
        """docs/store.md: a worker group "ref policy:v2" writes ref_policy_v2-<rank>-<pid>.jsonl."""
        setup_telemetry(_config(run_dir), worker_group="ref policy:v2", rank=1)
        with span("generation", "rl.test.named"):
            pass
        shutdown_telemetry()
        assert [p.name for p in (run_dir / "traces").iterdir()] == [f"ref_policy_v2-1-{os.getpid()}.jsonl"]

    def test_the_store_metric_writer_never_ticks_before_its_provider_exists(
        self, run_dir: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Building the OTLP exporters takes longer than the 50 ms store interval: the SDK
        warned 'Cannot call collect ... until it is registered' when its own thread ticked."""
        with caplog.at_level(logging.WARNING):
            setup_telemetry(_config(run_dir, otlp_endpoint="http://127.0.0.1:9", shutdown_timeout_ms=1000))
            time.sleep(0.2)
        assert [r.getMessage() for r in caplog.records if "Cannot call collect" in r.getMessage()] == []


class TestInitWorker:
    def _worker_env(self, run_dir: Path, **extra: str) -> dict[str, str]:
        return {**_config(run_dir).to_env(), **extra}

    def test_no_rlsight_variables_returns_none(self) -> None:
        assert init_worker(environ={"PATH": "/bin"}) is None
        assert active_runtime() is None

    def test_disabled_projection_returns_none(self, run_dir: Path) -> None:
        assert init_worker(environ=_config(run_dir, enabled=False).to_env()) is None
        assert active_runtime() is None

    def test_worker_rebuilds_the_drivers_config(self, run_dir: Path) -> None:
        driver_config = _config(run_dir, algorithm="grpo", shutdown_timeout_ms=1234)
        worker = init_worker(environ=driver_config.to_env())
        assert worker is not None
        assert worker.config == driver_config

    def test_worker_identity_comes_from_the_environment(self, run_dir: Path) -> None:
        env = self._worker_env(
            run_dir, RLSIGHT_WORKER_GROUP="rollout", RLSIGHT_RANK="3", RLSIGHT_WORLD_SIZE="8"
        )
        worker = init_worker(environ=env)
        assert worker is not None
        attrs = worker.resource_attributes
        assert (attrs["rl.worker_group"], attrs["rl.rank"], attrs["rl.world_size"]) == ("rollout", 3, 8)
        assert attrs["service.instance.id"] == f"run-1/rollout/3/{os.getpid()}"

    def test_arguments_win_over_the_environment(self, run_dir: Path) -> None:
        env = self._worker_env(run_dir, RLSIGHT_WORKER_GROUP="rollout", RLSIGHT_RANK="3")
        worker = init_worker(worker_group="trainer", rank=1, environ=env)
        assert worker is not None and (worker.worker_group, worker.rank) == ("trainer", 1)

    def test_default_worker_identity(self, run_dir: Path) -> None:
        worker = init_worker(environ=self._worker_env(run_dir))
        assert worker is not None
        assert (worker.worker_group, worker.rank, worker.resource_attributes["rl.world_size"]) == (
            "worker", 0, 1
        )

    def test_bad_rank_variable_is_a_config_error(self, run_dir: Path) -> None:
        with pytest.raises(ConfigError, match="RLSIGHT_RANK"):
            init_worker(environ=self._worker_env(run_dir, RLSIGHT_RANK="first"))

    def test_second_init_worker_returns_the_existing_runtime(self, run_dir: Path) -> None:
        first = init_worker(environ=self._worker_env(run_dir))
        assert init_worker(environ=self._worker_env(run_dir)) is first

    def test_deferred_worker_builds_no_providers_until_first_span(self, run_dir: Path) -> None:
        worker = init_worker(environ=self._worker_env(run_dir), deferred=True)
        assert worker is not None and not worker.materialized
        with span("generation", "rl.test.first"):
            pass
        assert worker.materialized

    def test_bind_identity_before_first_span_changes_the_resource(self, run_dir: Path) -> None:
        worker = init_worker(environ=self._worker_env(run_dir), deferred=True)
        assert worker is not None
        assert worker.bind_identity(worker_group="reference", rank=5, world_size=6,
                                    resource_attributes={"rl.backend": "vllm"})
        with span("logprob", "rl.test.logprob"):
            pass
        shutdown_telemetry()
        resource = _stored_resource(run_dir)
        assert resource["service.instance.id"] == f"run-1/reference/5/{os.getpid()}"
        assert (resource["rl.worker_group"], resource["rl.rank"], resource["rl.world_size"]) == (
            "reference", 5, 6
        )
        assert resource["rl.backend"] == "vllm"

    def test_bind_identity_after_first_span_warns_and_returns_false(self, run_dir: Path) -> None:
        worker = init_worker(environ=self._worker_env(run_dir, RLSIGHT_WORKER_GROUP="rollout"), deferred=True)
        assert worker is not None
        with span("generation", "rl.test.first"):
            pass
        with pytest.warns(RlsightWarning, match="after this process emitted telemetry"):
            assert worker.bind_identity(worker_group="late") is False
        assert worker.worker_group == "rollout"
        assert worker.resource_attributes["rl.worker_group"] == "rollout"


class _BlackHole:
    """An OTLP endpoint that accepts TCP connections and never answers (a hung collector)."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self._conns.append(conn)

    def close(self) -> None:
        """Stop accepting, then close every connection, one accepted at the last moment too
        (left open, it was garbage-collected during a later test as a ResourceWarning)."""
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the thread
        self._server.close()
        self._thread.join(timeout=5)
        for conn in self._conns:
            conn.close()


@pytest.fixture
def black_hole() -> Iterator[_BlackHole]:
    hole = _BlackHole()
    yield hole
    hole.close()


class TestShutdown:
    def test_shutdown_without_setup_is_an_empty_report(self) -> None:
        assert shutdown_telemetry() == ShutdownReport(0.0, False)

    def test_the_report_counts_internal_errors_per_site(self, run_dir: Path) -> None:
        telemetry = setup_telemetry(_config(run_dir, strict=False))
        for _ in range(2):
            telemetry.report_internal_error("record_metrics", ValueError("bad point"))
        telemetry.report_internal_error("span-start", OSError("disk"))
        report = telemetry.shutdown()
        assert report.internal_errors == {"record_metrics": 2, "span-start": 1}
        assert not report.timed_out  # the run's telemetry was delivered all the same

    def test_shutdown_turns_the_gate_off_and_clears_the_runtime(self, run_dir: Path) -> None:
        setup_telemetry(_config(run_dir))
        report = shutdown_telemetry()
        assert not report.timed_out and report.dropped_total == 0
        assert active_runtime() is None
        assert span("generation", "rl.test.after") is NOOP

    def test_shutdown_twice_is_harmless(self, run_dir: Path) -> None:
        telemetry = setup_telemetry(_config(run_dir))
        telemetry.shutdown()
        assert telemetry.shutdown() == ShutdownReport(0.0, False)

    def test_shutdown_flushes_every_span_to_the_store(self, run_dir: Path) -> None:
        setup_telemetry(_config(run_dir))
        for _ in range(50):
            with span("generation", "rl.test.gen"):
                pass
        report = shutdown_telemetry()
        assert report.exported["store"] == 50
        assert len(read_spans(run_dir).spans) == 50

    def test_deferred_worker_that_never_emitted_shuts_down_cleanly(self, run_dir: Path) -> None:
        worker = init_worker(environ=_config(run_dir).to_env(), deferred=True)
        assert worker is not None
        report = shutdown_telemetry()
        assert not report.timed_out and not worker.materialized

    def test_hung_collector_costs_the_budget_and_the_report_counts_every_lost_span(
        self, run_dir: Path, black_hole: _BlackHole
    ) -> None:
        """Against a collector that never answers, shutdown gives up, says so, keeps the store."""
        n = 3000
        # The configured budget also sets the OTLP exporter's own 10 s request timeout, so only
        # rlsight's deadline can make the 1 s shutdown below return in time.
        setup_telemetry(_config(run_dir, otlp_endpoint=black_hole.endpoint, shutdown_timeout_ms=10_000))
        for _ in range(n):
            with span("generation", "rl.test.gen"):
                pass
        report = shutdown_telemetry(timeout_ms=1000)
        assert report.timed_out
        assert report.exported["store"] == n
        assert report.exported["otlp"] + report.dropped_total == n
        assert set(report.dropped) <= {"otlp/shutdown_timeout", "otlp/export_failed"}
        assert report.elapsed_ms < 5 * 1000  # bounded: a multiple of the budget, never unbounded
        stored = read_spans(run_dir)
        assert len(stored.spans) == n and stored.skipped == []

    def test_an_exporter_that_gave_up_before_shutdown_makes_the_report_say_so(self, run_dir: Path) -> None:
        """Issue #18: every OTLP span dropped (collector down) used to report timed_out=False."""
        with socket.create_server(("127.0.0.1", 0)) as closed:
            endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"  # refused once closed
        telemetry = setup_telemetry(_config(run_dir, otlp_endpoint=endpoint, shutdown_timeout_ms=1000))
        with span("generation", "rl.test.gen"):
            pass
        (otlp,) = [p for p in telemetry._processors if p.name == "otlp"]
        deadline = time.monotonic() + 30
        while not otlp.dropped and time.monotonic() < deadline:  # the exporter retries ~1 s
            time.sleep(0.05)
        report = shutdown_telemetry(timeout_ms=2000)
        assert report.dropped == {"otlp/export_failed": 1}
        assert report.timed_out

    def test_a_hung_collector_is_one_warning_line_without_a_traceback(
        self, run_dir: Path, black_hole: _BlackHole, caplog: pytest.LogCaptureFixture
    ) -> None:
        setup_telemetry(_config(run_dir, otlp_endpoint=black_hole.endpoint, shutdown_timeout_ms=10_000))
        with span("generation", "rl.test.gen"):
            pass
        with caplog.at_level(logging.WARNING, logger="rlsight"):
            assert shutdown_telemetry(timeout_ms=1000).timed_out
        ours = [r for r in caplog.records if r.name == "rlsight" and r.levelno >= logging.WARNING]
        assert ours, "expected the shutdown to warn about the lost spans"
        assert [r.getMessage() for r in ours if r.exc_info or "\n" in r.getMessage()] == []
        # A collector that takes the whole budget is not a failed shutdown step: the metric
        # flushes ran out of time and said so in a second line (reviewer r1).
        assert [r.getMessage() for r in ours if "step failed" in r.getMessage()] == []


def test_setup_with_a_store_that_cannot_be_opened_is_a_config_error(tmp_path: Path) -> None:
    import rlsight
    from rlsight import ConfigError, TelemetryConfig

    (tmp_path / "traces").write_text("a file where the traces folder should be")
    with pytest.raises(ConfigError, match="cannot open the local store"):
        rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path)))
    assert rlsight.runtime.active_runtime() is None


def test_setup_failing_on_a_missing_exporter_extra_leaves_no_files_or_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OTLP exporters are built before the store opens its files and starts its threads,
    so a setup that fails on them leaves no run folder for `rlsight runs` to list and no
    writer thread behind (it used to leave empty traces/metrics/live files, a live file
    without a shutdown line, and two threads)."""
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)
    run = tmp_path / "run"
    before = set(threading.enumerate())
    with pytest.raises(ConfigError, match=r"rlsight\[grpc\]"):
        setup_telemetry(TelemetryConfig(run_dir=str(run), otlp_protocol="grpc",
                                        otlp_endpoint="http://127.0.0.1:4317"))
    assert not run.exists()
    assert [t.name for t in set(threading.enumerate()) - before if t.is_alive()] == []
    assert active_runtime() is None


def test_an_exporter_built_before_another_fails_is_shut_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The protocol is per signal: spans over http/protobuf, metrics over grpc without the
    grpc extra. The span exporter, already built, is shut down with the failed setup."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.metric_exporter", None)
    shut: list[object] = []
    real_shutdown = OTLPSpanExporter.shutdown

    def shutdown(self: OTLPSpanExporter) -> None:
        shut.append(self)
        real_shutdown(self)

    monkeypatch.setattr(OTLPSpanExporter, "shutdown", shutdown)
    with pytest.raises(ConfigError, match=r"rlsight\[grpc\]"):
        setup_telemetry(TelemetryConfig(run_dir=str(tmp_path / "run"), otlp_protocol="http/protobuf",
                                        otlp_metrics_protocol="grpc",
                                        otlp_endpoint="http://127.0.0.1:4318"))
    assert len(shut) == 1
    assert active_runtime() is None


class TestManifestOwner:
    """A second process calling setup_telemetry on a live driver's run keeps its manifest."""

    @staticmethod
    def _foreign_manifest(run_dir: Path, pid: int) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "manifest.json").write_text(json.dumps(
            {"store_format": 1, "run_id": "run-1", "host": socket.gethostname(), "pid": pid}))

    def test_a_live_drivers_manifest_is_kept_with_one_warning(self, run_dir: Path) -> None:
        driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            self._foreign_manifest(run_dir, driver.pid)
            with pytest.warns(RlsightWarning, match=r"init_worker\(\)"):
                setup_telemetry(_config(run_dir))
            with span("training", "rl.train.policy"):
                pass
            shutdown_telemetry(timeout_ms=2000)
            assert read_manifest(run_dir)["pid"] == driver.pid  # type: ignore[index]
            assert [s.name for s in read_spans(run_dir).spans] == ["rl.train.policy"]
        finally:
            driver.kill()
            driver.wait()

    def test_a_dead_drivers_manifest_is_taken_over(self, run_dir: Path) -> None:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        self._foreign_manifest(run_dir, gone.pid)
        setup_telemetry(_config(run_dir))
        assert read_manifest(run_dir)["pid"] == os.getpid()  # type: ignore[index]
