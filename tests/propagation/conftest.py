"""A local Ray cluster shared by the whole test session, every worker initialised by rlsight.

Starting Ray costs ~5-7 s and each actor ~125 MiB, so there is one cluster per session
(``ray_cluster``) and tests use few actors. Workers write their spans into the cluster's
run folder; read them back with ``_ray_support.wait_for_spans``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _ray_support import RayCluster

from rlsight import TelemetryConfig
from rlsight.ray import ray_runtime_env


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
    ray.init(num_cpus=2, include_dashboard=False, runtime_env=ray_runtime_env(config))
    try:
        yield RayCluster(config)
    finally:
        ray.shutdown()
