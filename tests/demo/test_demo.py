"""The demo end to end, once, on the session's Ray cluster: what it wrote is one honest run."""

from __future__ import annotations

import argparse
import importlib
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import ray

from _ray_support import RayCluster
from rlsight.analysis import Buckets, analyze_run
from rlsight.commands import demo as demo_command
from rlsight.store import MetricPoint, SpanRecord, read_metrics, read_spans
from rlsight.testing import isolated_metric_groups

pytestmark = pytest.mark.ray

STEPS = 3  # step 2 validates, step 3 checkpoints; steps 1 and 3 do neither
PROMPTS, GROUP_SIZE = 8, 4  # the demo's batch: 8 prompts, 4 completions each
SERVER, CLIENT = 2, 3  # OTLP span kinds


@dataclass(frozen=True)
class DemoRun:
    run_dir: Path
    spans: list[SpanRecord]
    points: list[MetricPoint]

    def named(self, name: str) -> list[SpanRecord]:
        return [s for s in self.spans if s.name == name]

    def parent(self, span: SpanRecord) -> SpanRecord:
        (parent,) = [s for s in self.spans if s.span_id == span.parent_span_id]
        return parent

    def per_step(self, name: str, **attributes: object) -> dict[int, float]:
        """Sum of a metric's points by ``rl.step`` (delta counters may split a step in two)."""
        out: dict[int, float] = defaultdict(float)
        for p in self.points:
            if p.name == name and all(p.attributes.get(k) == v for k, v in attributes.items()):
                out[int(p.attributes["rl.step"])] += float(p.value or 0)
        return dict(out)


@pytest.fixture(scope="module")
def demo_module() -> Iterator[ModuleType]:
    """``rlsight.demo``, imported with the metric registry restored afterwards.

    Importing the demo registers its metric group in this process, where every later test's
    tee would then record it too; the registry is put back as it was (as tests/test_metrics.py
    does around each of its tests).
    """
    with isolated_metric_groups():
        yield importlib.import_module("rlsight.demo")


@pytest.fixture(scope="module")
def demo(
    demo_module: ModuleType, ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory
) -> DemoRun:
    """One demo run (``per_step`` + ``per_prompt``) on the already-initialised session cluster."""
    run_dir = demo_module.run_demo(tmp_path_factory.mktemp("demo") / "run", steps=STEPS)
    assert isinstance(run_dir, Path)
    return DemoRun(run_dir, read_spans(run_dir).spans, read_metrics(run_dir).points)


def _worker_group(span: SpanRecord) -> object:
    return span.resource["rl.worker_group"]


def test_every_span_of_every_process_is_in_one_trace(demo: DemoRun) -> None:
    (job,) = demo.named("rl.job")
    assert {s.trace_id for s in demo.spans} == {job.trace_id}
    assert {_worker_group(s) for s in demo.spans} == {"driver", "generation", "policy", "env"}


def test_actor_spans_carry_their_own_worker_group_and_pid(demo: DemoRun) -> None:
    expected = {
        "rl.train.policy": "driver",
        "rl.generation.sample": "generation",
        "rl.train.forward_backward": "policy",
        "rl.env.score": "env",
    }
    pids: dict[object, set[object]] = defaultdict(set)
    for name, group in expected.items():
        for s in demo.named(name):
            assert _worker_group(s) == group, name
            pids[group].add(s.resource["process.pid"])
    assert pids["driver"] == {os.getpid()}
    assert all(len(p) == 1 for p in pids.values()), pids
    assert len(set.union(*pids.values())) == 4, "each worker group is a process of its own"


def test_worker_spans_nest_under_the_driver_call_that_caused_them(demo: DemoRun) -> None:
    for worker, caller in [
        ("rl.train.forward_backward", "rl.train.policy"),
        ("rl.data_plane.get", "rl.logprob.reference"),
        ("rl.refit.load_weights", "rl.refit.push_weights"),
        ("rl.validation.generate", "rl.validate"),
        ("rl.checkpoint.write", "rl.checkpoint.save"),
    ]:
        spans = demo.named(worker)
        assert spans, worker
        assert {demo.parent(s).name for s in spans} == {caller}, worker
    loads = demo.named("rl.worker.load_model")
    assert {_worker_group(s) for s in loads} == {"generation", "policy"}
    assert {demo.parent(s).name for s in loads} == {"rl.setup.workers"}


def test_the_http_hop_to_the_environment_is_in_the_trace(demo: DemoRun) -> None:
    """generation worker -> aiohttp client -> env service's server -> its reward span."""
    scores = demo.named("rl.env.score")
    # One request per prompt: the step's rollouts plus step 2's 15 validation prompts.
    assert len(scores) == STEPS * PROMPTS + 15
    for score in scores:
        server = demo.parent(score)
        client = demo.parent(server)
        request = demo.parent(client)
        assert (server.kind, _worker_group(server)) == (SERVER, "env")
        assert (client.kind, _worker_group(client)) == (CLIENT, "generation")
        assert request.name == "rl.reward.env_request"
        for s in (score, server, client, request):
            assert s.attributes["rl.span_group"] == "per_prompt", s.name
    requests = [r for r in demo.named("rl.reward.env_request") if demo.parent(r).name == "rl.reward.score"]
    assert {demo.parent(demo.parent(r)).name for r in requests} == {"rl.rollout.reward"}


def test_validation_generation_is_counted_as_overhead(demo: DemoRun) -> None:
    """Same sampling code; validation's bucket_scope makes it overhead, in the worker process."""
    by_caller: dict[str, set[object]] = defaultdict(set)
    for s in demo.named("rl.generation.sample"):
        by_caller[demo.parent(s).name].add(s.attributes["rl.bucket"])
    assert by_caller == {"rl.validation.generate": {"overhead"}, "rl.rollout.generate": {"productive"}}


def test_the_trainer_scalars_are_teed_with_their_step(demo: DemoRun) -> None:
    steps = set(range(1, STEPS + 1))
    for name in ("rl_demo.train.loss", "rl_demo.train.kl", "rl_demo.rollout.reward"):
        assert set(demo.per_step(name)) == steps, name
    assert set(demo.per_step("rl_demo.validation.reward")) == {2}
    missing = demo.per_step(
        "rl.metrics.skipped", **{"rl.metric.name": "rl_demo.validation.reward", "rl.metric.reason": "missing"}
    )
    assert missing == {1: 1.0, 3: 1.0}, "a step without validation is a gap, never a 0"
    assert set(demo.per_step("rl.efficiency.seconds")) == steps


def test_engine_deltas_are_recorded_per_step_by_the_generation_worker(demo: DemoRun) -> None:
    engine = [p for p in demo.points if p.name.startswith("rl.engine.")]
    assert {p.resource["rl.worker_group"] for p in engine} == {"generation"}
    generated = demo.per_step("rl.engine.generation_tokens")
    teed = demo.per_step("rl_demo.rollout.tokens")
    # Steps without validation: the engine generated exactly the rollout the trainer logged.
    assert generated[1] == teed[1] and generated[3] == teed[3]
    assert generated[2] > teed[2], "step 2's validation generated too"
    finished = demo.per_step("rl.engine.request.success")
    assert finished[1] == PROMPTS * GROUP_SIZE
    reasons = {
        p.attributes.get("rl.engine.finish_reason") for p in engine if p.name == "rl.engine.request.success"
    }
    assert reasons and reasons <= {"stop", "length"}


def _assert_partition(buckets: Buckets) -> None:
    parts = (buckets.productive_ns, buckets.overhead_ns, buckets.idle_ns, buckets.wasted_ns,
             buckets.unattributed_ns)
    assert sum(parts) == buckets.wall_ns > 0


def test_the_report_partitions_wall_time_exactly(demo: DemoRun) -> None:
    report = analyze_run(demo.run_dir)
    assert report.summary.steps == STEPS
    _assert_partition(report.summary.buckets)
    for step in report.steps:
        _assert_partition(step.buckets)
        assert step.buckets.productive_ns > 0
    assert {g.worker_group for g in report.fleets.groups} >= {"driver", "generation", "policy", "env"}


def test_a_checkpoint_is_written_into_the_run_folder(demo: DemoRun) -> None:
    assert [p.name for p in (demo.run_dir / "checkpoints").iterdir()] == ["step_000003.npz"]


def test_an_already_initialised_cluster_is_left_running(demo: DemoRun) -> None:
    assert ray.is_initialized()
    assert ray.cluster_resources()["CPU"] == 2


def test_rlsight_demo_help_names_the_demo_defaults(demo_module: ModuleType) -> None:
    """The command keeps no defaults of its own (importing the demo for --help would import Ray)."""
    parser = argparse.ArgumentParser()
    demo_command.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert f"(default {demo_module.DEFAULT_STEPS})" in text
    assert f"(default {','.join(demo_module.DEFAULT_SPAN_GROUPS)})" in text
    assert parser.parse_args([]) == argparse.Namespace(run_dir=None, steps=None, span_groups=None)
