"""Ray workers: set up before their first call (#9.10), and loud when carriers are lost (#9.3)."""

from __future__ import annotations

import warnings

import pytest
import ray

from _ray_support import RayCluster
from rlsight.propagation import trace_context_kwargs
from rlsight.ray import worker_options
from rlsight.testing import capture_telemetry

pytestmark = pytest.mark.ray


def test_a_named_actor_has_its_providers_before_its_first_call(ray_cluster: RayCluster) -> None:
    """The ~100 ms of provider setup happens at process start, not in the first step."""
    from _trap_actors import SetupProbe

    probe = SetupProbe.options(**worker_options(worker_group="probe", rank=0)).remote()
    try:
        state = ray.get(probe.state.remote())
    finally:
        ray.kill(probe)
    assert state == {"telemetry": True, "materialized": True, "store_imported": True}


def test_an_unnamed_actor_has_the_exporters_imported_before_its_first_call(ray_cluster: RayCluster) -> None:
    """It still waits for its class name, but the imports (most of the cost) are done."""
    from _trap_actors import SetupProbe

    probe = SetupProbe.remote()
    try:
        state = ray.get(probe.state.remote())
    finally:
        ray.kill(probe)
    assert state == {"telemetry": True, "materialized": False, "store_imported": True}


def test_a_worker_without_telemetry_warns_when_a_carrier_arrives(ray_cluster: RayCluster) -> None:
    """What a forgotten ray_runtime_env looks like from the worker: carriers and no telemetry."""
    from _trap_actors import SetupProbe

    off = SetupProbe.options(runtime_env={"env_vars": {"RLSIGHT_ENABLED": "false"}}).remote()
    try:
        with capture_telemetry(run_dir=ray_cluster.run_dir, run_id=ray_cluster.config.run_id):
            from rlsight import RL, umbrella_span

            with umbrella_span(RL.STEP, "rl.test.driver"):
                carrier = trace_context_kwargs()
        state, messages = ray.get([off.state.remote(), off.receive.remote(next(iter(carrier.values())))])
    finally:
        ray.kill(off)
    assert state["telemetry"] is False
    assert any("no rlsight telemetry" in m and "ray_runtime_env" in m for m in messages), messages


def test_the_driver_of_a_job_with_rlsights_runtime_env_does_not_warn(ray_cluster: RayCluster) -> None:
    from _trap_actors import SetupProbe
    from rlsight import RL, dispatch_with_trace_context, umbrella_span

    probe = SetupProbe.remote()
    try:
        with capture_telemetry(run_dir=ray_cluster.run_dir, run_id=ray_cluster.config.run_id):
            with umbrella_span(RL.STEP, "rl.test.driver"), warnings.catch_warnings():
                warnings.simplefilter("error")
                assert ray.get(dispatch_with_trace_context(probe.ping)) == 1
    finally:
        ray.kill(probe)
