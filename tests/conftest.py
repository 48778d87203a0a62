"""Shared fixtures: a run folder per test, an in-memory capture, and one Ray cluster per session.

Starting Ray costs ~5-7 s and each actor ~125 MiB, so there is one cluster per session
(``ray_cluster``), shared by the propagation tests and the demo's, and tests use few actors.
Workers write their spans into the cluster's run folder; read them back with
``_ray_support.wait_for_spans``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from _ray_support import RayCluster
from _rotel import Collector, running_collector
from rlsight import TelemetryConfig
from rlsight.ray import ray_runtime_env
from rlsight.testing import Capture, capture_telemetry

# Ray's single-machine switch, before anything imports Ray: the session cluster listens on
# 127.0.0.1 only, as the demo's does (docs/demo.md, "Network exposure").
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


#: Fixtures that start Ray: the shared cluster, and the two-node run of the Ray store transport.
_RAY_FIXTURES = frozenset({"ray_cluster", "two_node"})


#: Tests that take a second or more each (other interpreters, servers, waits, long property
#: runs), by module or ``module::Class``: marked ``slow``, which ``make test-fast`` leaves out.
#: ``make test`` runs them all.
_SLOW = (
    "check/test_check_rlsight_docs.py",  # every docs example in an interpreter of its own
    "test_logger_recipes.py",  # W&B, MLflow and TensorBoard runs in subprocesses
    "verify/test_goodput_oracle.py",  # random span forests against a brute-force oracle
    "test_readme.py",  # the README example and the CLI as subprocesses
    "propagation/test_propagation_http_stacks.py",  # uvicorn servers and real clients
    "test_metrics_drift.py",  # the drift checker over the whole tree
    "test_watchdog.py",  # waits for a stall to be detected
    "live/test_postmortem.py",  # a driver killed with SIGKILL
    "analysis/test_catalog.py",  # a run recorded in a subprocess
    "analysis/test_properties.py",  # hypothesis over whole runs
    "analysis/test_intervals.py",  # hypothesis against brute force
    "test_step_summary.py",  # hypothesis: online against offline goodput
    "store/test_store.py::TestAcrossProcesses",  # child writers, one killed mid-write
    "test_runtime.py::TestShutdown",  # hung collectors cost the shutdown budget
    "store/test_writer_under_load.py",  # writer threads flat out, one process killed
    "test_export.py",  # a stored run sent to a real collector, interrupted and resumed
    "analysis/test_columnar.py::test_a_two_process_read_equals_a_serial_read",
    "analysis/test_column_cache.py::test_a_two_process_read_fills_and_uses_the_cache_like_a_serial_one",
    "analysis/test_column_cache.py::test_any_history_of_a_file_reads_the_same_cached_and_uncached",
    "analysis/test_window.py::test_a_window_read_again_by_two_processes_is_the_same",
    "test_redaction.py::test_the_manifest_holds_no_secret_from_argv_or_config",  # a subprocess
    "analysis/test_analysis_api.py::test_the_cli_help_imports_no_numpy_or_rich",  # a subprocess
    "test_engines.py::TestScrapeThreads",  # endpoints that stall past the scrape timeout
    "test_engines.py::TestFromUrl",
    "test_timers.py::test_the_docs_example_prints_what_the_page_says",  # a subprocess
    "test_busy_time.py::test_the_window_stays_bounded_while_threads_emit_spans_flat_out",  # 100k spans
    "test_busy_time.py::test_windows_add_up_to_the_reports_fleet_view",  # hypothesis over runs
    "cli/test_help.py::test_a_bad_demo_flag_names_the_command_the_user_typed",  # a subprocess
    "test_engines.py::TestNativeTracingEnv",  # shutdowns facing an endpoint nobody serves
    "analysis/test_sorting.py",  # hypothesis against numpy's lexsort
    "store/test_store.py::TestAttributeRoundTrip",  # hypothesis through the real store
    "store/test_span_codec.py::TestSameBytesAsTheMappings",  # hypothesis: codec against mappings
    "test_config.py::TestEnvRoundTrip",  # hypothesis over whole configs
    "propagation/test_propagation_decorator.py::test_any_carrier_never_fails_a_decorated_call",
    "test_public_api.py::test_import_rlsight_leaves_the_opentelemetry_sdk_for_setup",  # a subprocess
    "test_import_graph.py",  # parses the whole tree, several times
    "test_semconv.py::test_the_package_spells_each_wire_name_only_in_the_vocabulary_module",
    "test_fuzz.py",  # hypothesis fuzzing of the readers and parsers
    "store/test_typed_walk.py::test_the_typed_walk_yields_what_the_plain_walk_yields",
    "analysis/test_docs_goodput.py::test_the_worked_example_runs_and_checks_its_own_numbers",
    "check/test_check_command.py::test_installed_cli_runs_check_as_a_subprocess",
    "cli/test_report_cli.py::TestReport::test_the_installed_command_runs_without_a_progress_bar_in_a_pipe",
    "cli/test_report_cli.py::TestReport::test_python_dash_m_rlsight_runs_the_command",
    "cli/test_watch_cli.py::test_a_run_resumed_after_its_driver_was_killed_reads_finished_once_the_new_driver_ends",
)
_TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests that use Ray ``ray``, the rotel fixture ``collector``, ``_SLOW`` ``slow``.

    ``make test-fast`` leaves out both (and the browser, collector and Prometheus tests).
    """
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & _RAY_FIXTURES and item.get_closest_marker("ray") is None:
            item.add_marker(pytest.mark.ray)
        if "collector" in fixtures and item.get_closest_marker("collector") is None:
            item.add_marker(pytest.mark.collector)
        node = item.path.relative_to(_TESTS).as_posix() + "::" + item.nodeid.split("::", 1)[-1]
        if any(node == s or node.startswith((s + "::", s + "[")) for s in _SLOW):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A fresh, not yet created run folder (rlsight creates it on setup)."""
    return tmp_path / "run"


@pytest.fixture
def capture(run_dir: Path) -> Iterator[Capture]:
    """Telemetry set up with every span group on, recording into memory and ``run_dir``."""
    with capture_telemetry(run_dir=run_dir) as cap:
        yield cap


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """``ray.init(num_cpus=2)`` with ``ray_runtime_env(config)``: every span group on, strict."""
    import ray

    config = TelemetryConfig(
        run_id="ray-tests",
        run_dir=str(tmp_path_factory.mktemp("ray-run")),
        span_groups=("all",),
        strict=True,
        shutdown_timeout_ms=2000,
    )
    # address="local": always a cluster of this session's own, never one another process on
    # the machine left in /tmp/ray/ray_current_cluster (ray.init would join it).
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             runtime_env=ray_runtime_env(config))
    try:
        yield RayCluster(config)
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    """A real OTLP collector (rotel) on 127.0.0.1 for the session; skipped without rotel."""
    with running_collector(tmp_path_factory.mktemp("rotel")) as running:
        yield running
