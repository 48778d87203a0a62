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
