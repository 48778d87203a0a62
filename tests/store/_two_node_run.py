"""Two runs on a two-node Ray cluster (two raylets on this machine), for the Ray transport tests.

Run as a script in its own process: ``python _two_node_run.py ROOT``. The session's shared Ray
cluster lives in the pytest process, and a process can be connected to one Ray cluster only,
so the two-node cluster gets a process of its own (and is started once, for both runs).

In each run the driver writes ``ROOT/<run>/driver``; a worker pinned to the second node (by its
custom resource) writes its own store into ``ROOT/<run>/node2``, a different root, as a
node-local disk would be; a worker on the driver's node writes the driver's folder itself.
Run ``whole`` ships everything; run ``killed`` kills the sink actor after step 2. Prints one
JSON line per run: what the tests check.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

from rlsight import RL, TelemetryConfig, job_span, setup_telemetry, span, step_span
from rlsight.propagation import accepts_trace_context, dispatch_with_trace_context
from rlsight.ray import ray_runtime_env, worker_options
from rlsight.store._ray_sink import SINK_NAMESPACE, sink_name

STEPS = 5


@ray.remote(num_cpus=0)
class Trainer:
    @accepts_trace_context
    def train(self, step: int) -> int:
        with span(RL.TRAINING, "rl.train.policy", step_index=step):
            time.sleep(0.01)
        return step

    def node(self) -> str:
        return str(ray.get_runtime_context().get_node_id())

    def finish(self) -> dict[str, object]:
        """Shut this worker's telemetry down (ships what is left) and say what it dropped."""
        from rlsight import shutdown_telemetry

        report = shutdown_telemetry(5000)
        return {"exported": dict(report.exported), "dropped": dict(report.dropped)}


def _wait_for_shipped(traces: Path, timeout_s: float = 60.0) -> None:
    """Until the sink wrote a line of the far worker (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.stat().st_size for p in traces.glob("policy-1-*.jsonl")):
            return
        time.sleep(0.1)


def _config(root: Path, run: str) -> TelemetryConfig:
    return TelemetryConfig(run_id=run, run_dir=str(root / run / "driver"), span_groups=("all",),
                           store_transport="ray", strict=True, shutdown_timeout_ms=8000)


def _run(root: Path, run: str) -> dict[str, Any]:
    config = _config(root, run)
    telemetry = setup_telemetry(config)
    # The job's runtime_env carries the first run's config; each actor names its own run.
    env = {"RLSIGHT_RUN_ID": run, "RLSIGHT_RUN_DIR": config.run_dir}
    far = Trainer.options(resources={"node2": 0.1}, **worker_options(
        worker_group="policy", rank=1, world_size=2,
        runtime_env={"env_vars": {**env, "RLSIGHT_RUN_DIR": str(root / run / "node2")}})).remote()
    near = Trainer.options(resources={"head": 0.1}, **worker_options(
        worker_group="policy", rank=0, world_size=2, runtime_env={"env_vars": env})).remote()
    nodes = ray.get([far.node.remote(), near.node.remote()])
    with job_span():
        for step in range(1, STEPS + 1):
            with step_span(step):
                ray.get([dispatch_with_trace_context(w.train, step) for w in (far, near)])
            if run == "killed" and step == 2:
                _wait_for_shipped(config.run_path / "traces")
                ray.kill(ray.get_actor(sink_name(run), namespace=SINK_NAMESPACE))
    finished = ray.get([far.finish.remote(), near.finish.remote()])
    report = telemetry.shutdown()
    for actor in (far, near):
        ray.kill(actor)
    return {"run": run, "nodes": nodes, "driver_node": ray.get_runtime_context().get_node_id(),
            "far": finished[0], "near": finished[1], "driver_dropped": dict(report.dropped)}


def main(root: Path) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"head": 1}, "include_dashboard": False})
    cluster.add_node(num_cpus=1, resources={"node2": 1})
    ray.init(address=cluster.address, runtime_env=ray_runtime_env(_config(root, "whole")))
    try:
        for run in ("whole", "killed"):
            print(json.dumps(_run(root, run)), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
