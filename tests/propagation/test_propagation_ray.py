"""One trace across a real local Ray cluster: actors, threads, streams, tasks, chains, HTTP."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import ray
from _ray_actors import (
    AsyncEnv,
    SyncWorker,
    ThreadedWorker,
    UndecoratedLoader,
    UndecoratedWorker,
    traced_task,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from _ray_support import RayCluster, wait_for_spans
from rlsight import RL, RlsightWarning, umbrella_span
from rlsight.propagation import TRACE_CONTEXT_KWARG, dispatch_with_trace_context, trace_context_kwargs
from rlsight.ray import traced_handle, worker_options
from rlsight.store import SpanRecord
from rlsight.testing import capture_telemetry

pytestmark = pytest.mark.ray


@dataclass
class Actors:
    sync: Any
    env: Any
    threaded: Any


@pytest.fixture(scope="module")
def actors(ray_cluster: RayCluster) -> Iterator[Actors]:
    """Three actors for the module: few, because each is a ~125 MiB process."""
    sync = SyncWorker.options(**worker_options(worker_group="policy", rank=1, world_size=2)).remote()
    env = AsyncEnv.remote()
    threaded = ThreadedWorker.remote()
    ray.get([sync.identity.remote(), env.identity.remote(), threaded.identity.remote()])
    yield Actors(sync, env, threaded)
    for handle in (sync, env, threaded):
        ray.kill(handle)


def _by_name(spans: Sequence[SpanRecord], name: str) -> list[SpanRecord]:
    return [s for s in spans if s.name == name]


def test_one_trace_across_actors_tasks_streams_chains_and_http(
    ray_cluster: RayCluster, actors: Actors
) -> None:
    env_port = ray.get(actors.env.serve.remote())
    threaded = traced_handle(actors.threaded)
    with capture_telemetry(run_dir=ray_cluster.run_dir, run_id=ray_cluster.config.run_id):
        with umbrella_span(RL.STEP, "rl.test.driver") as driver:
            results = ray.get([
                dispatch_with_trace_context(actors.sync.work, "sync"),
                dispatch_with_trace_context(actors.env.work, "async"),
                actors.sync.call_next.remote(traced_handle(actors.env), "chained", **trace_context_kwargs()),
                dispatch_with_trace_context(traced_task, "task"),
                threaded.fetch.remote(f"http://127.0.0.1:{env_port}/score"),
                *[threaded.work.remote(f"thread-{i}") for i in range(4)],
            ])
            streamed = [ray.get(ref) for ref in dispatch_with_trace_context(actors.sync.stream, 3)]
            astreamed = [ray.get(ref) for ref in dispatch_with_trace_context(actors.env.stream, 2)]
        trace_id = f"{driver.get_span_context().trace_id:032x}"
        driver_span_id = f"{driver.get_span_context().span_id:016x}"
        pids = {
            "policy": ray.get(actors.sync.identity.remote())["pid"],
            "AsyncEnv": ray.get(actors.env.identity.remote())["pid"],
            "ThreadedWorker": ray.get(threaded.identity.remote())["pid"],
            "worker": results[3]["pid"],
        }
    assert results[:3] == ["sync", "async", "chained"]
    assert results[4] == 1.0
    assert (streamed, astreamed) == ([0, 1, 2], [0, 1])

    expected = 19  # 1 driver + 1+1+2+1 + 3 fetch hops + 4 threaded + 3 + 2 streamed + 1 task
    spans = wait_for_spans(
        ray_cluster.run_dir, lambda s: len([x for x in s if x.trace_id == trace_id]) >= expected
    )
    mine = [s for s in spans if s.trace_id == trace_id]
    by_id = {s.span_id: s for s in mine}

    def parent(s: SpanRecord) -> SpanRecord:
        assert s.parent_span_id in by_id, f"{s.name} has a parent outside the driver's trace"
        return by_id[s.parent_span_id]

    direct = [
        "rl.test.sync.work", "rl.test.async.work", "rl.test.chain.first_hop", "rl.test.task",
        "rl.test.threaded.fetch", "rl.test.threaded.work", "rl.test.sync.stream", "rl.test.async.stream",
    ]
    for name in direct:
        found = _by_name(mine, name)
        assert found, f"no {name} span in the driver's trace"
        for s in found:
            if s.attributes.get("rl.label") == "chained":
                assert parent(s).name == "rl.test.chain.first_hop"
            else:
                assert s.parent_span_id == driver_span_id, f"{name} is not a child of the driver span"
    assert len(_by_name(mine, "rl.test.threaded.work")) == 4
    assert len(_by_name(mine, "rl.test.sync.stream")) == 3
    assert len(_by_name(mine, "rl.test.async.stream")) == 2
    (chained,) = [s for s in _by_name(mine, "rl.test.async.work") if s.attributes["rl.label"] == "chained"]
    assert parent(parent(chained)).span_id == driver_span_id

    (score,) = _by_name(mine, "rl.test.env.score")
    server = parent(score)
    client = parent(server)
    assert (server.kind, client.kind) == (2, 3)  # SERVER, CLIENT
    assert parent(client).name == "rl.test.threaded.fetch"
    assert server.attributes["rl.span_group"] == client.attributes["rl.span_group"] == "per_prompt"

    expected_group = {
        "rl.test.driver": "driver",
        "rl.test.sync.work": "policy", "rl.test.sync.stream": "policy", "rl.test.chain.first_hop": "policy",
        "rl.test.async.work": "AsyncEnv", "rl.test.async.stream": "AsyncEnv", "rl.test.env.score": "AsyncEnv",
        "rl.test.threaded.work": "ThreadedWorker", "rl.test.threaded.fetch": "ThreadedWorker",
        "rl.test.task": "worker",
    }
    for s in mine:
        group = expected_group.get(s.name) or ("AsyncEnv" if s.kind == 2 else "ThreadedWorker")
        assert s.resource["rl.worker_group"] == group, s.name
        if group != "driver":
            assert s.resource["process.pid"] == pids[group], s.name
    assert _by_name(mine, "rl.test.sync.work")[0].resource["rl.rank"] == 1
    # Ray's node address, which its errors print beside a pid (``pid=22574, ip=...``).
    assert {tuple(s.resource.get("host.ip") or ()) for s in mine
            if s.resource["rl.worker_group"] != "driver"} == {(ray.util.get_node_ip_address(),)}
    assert len({s.resource["service.instance.id"] for s in mine}) == 5
    assert len({s.attributes["thread.id"] for s in _by_name(mine, "rl.test.threaded.work")}) >= 1


def test_traced_actor_names_its_process_before_spans_its_init_opens(
    ray_cluster: RayCluster, actors: Actors
) -> None:
    pid = ray.get(actors.threaded.identity.remote())["pid"]

    def loaded(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
        return [s for s in spans if s.name == "rl.worker.load_model" and s.resource["process.pid"] == pid]

    (load,) = loaded(wait_for_spans(ray_cluster.run_dir, lambda s: bool(loaded(s))))
    assert load.resource["rl.worker_group"] == "ThreadedWorker"


def test_an_actor_whose_first_span_comes_from_an_undecorated_method_or_init_is_named_after_its_class(
    ray_cluster: RayCluster,
) -> None:
    """Issue #18: the actor stayed `worker` for good when no decorated call came first."""
    worker, loader = UndecoratedWorker.remote(), UndecoratedLoader.remote()  # type: ignore[attr-defined]
    try:
        ident, loader_ident = ray.get([worker.work.remote(), loader.identity.remote()])
        assert (ident["worker_group"], loader_ident["worker_group"]) == (
            "UndecoratedWorker", "UndecoratedLoader")

        def mine(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
            return [s for s in spans if s.resource["process.pid"] in (ident["pid"], loader_ident["pid"])]

        found = mine(wait_for_spans(ray_cluster.run_dir, lambda s: len(mine(s)) >= 2))
        assert sorted((s.name, s.resource["rl.worker_group"]) for s in found) == [
            ("rl.test.undecorated.work", "UndecoratedWorker"),
            ("rl.worker.load_model", "UndecoratedLoader"),
        ]
    finally:
        ray.kill(worker)
        ray.kill(loader)


def test_with_telemetry_off_calls_pass_no_extra_keyword(actors: Actors) -> None:
    with umbrella_span(RL.STEP, "rl.test.driver_off"):
        received = ray.get([
            dispatch_with_trace_context(actors.sync.received),
            actors.sync.received.remote(**trace_context_kwargs()),
            traced_handle(actors.sync).received.remote(),
        ])
        results = ray.get([
            dispatch_with_trace_context(actors.sync.work, "sync"),
            dispatch_with_trace_context(actors.env.work, "async"),
            dispatch_with_trace_context(traced_task, "task"),
            traced_handle(actors.threaded).work.remote("thread"),
        ])
        streamed = [ray.get(ref) for ref in dispatch_with_trace_context(actors.sync.stream, 2)]
    assert received == [[], [], []]
    assert results[:2] == ["sync", "async"]
    assert results[2]["telemetry"] and isinstance(results[3], int)
    assert streamed == [0, 1]


def test_an_undecorated_method_with_var_kwargs_receives_the_carrier(actors: Actors) -> None:
    """Ray's signature check accepts the keyword, so only the decorator can remove it."""
    with capture_telemetry(), umbrella_span(RL.STEP, "rl.test.driver"):
        received = ray.get(dispatch_with_trace_context(actors.sync.received))
    assert received == [TRACE_CONTEXT_KWARG]


def test_an_undecorated_method_still_works_and_warns_once(actors: Actors) -> None:
    with capture_telemetry(), umbrella_span(RL.STEP, "rl.test.driver"):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            results = ray.get([
                dispatch_with_trace_context(actors.sync.plain, 1),
                dispatch_with_trace_context(actors.sync.plain, 2),
                traced_handle(actors.sync).plain.remote(3),
                traced_handle(actors.sync).plain.options(name="plain").remote(4),
                dispatch_with_trace_context(traced_handle(actors.sync).plain, 5),
            ])
    assert results == [1, 2, 3, 4, 5]
    ours = [w for w in seen if issubclass(w.category, RlsightWarning)]
    assert len(ours) == 1
    assert "SyncWorker.plain" in str(ours[0].message)


def test_a_worker_whose_setup_fails_keeps_running_without_telemetry(ray_cluster: RayCluster) -> None:
    broken = SyncWorker.options(runtime_env={"env_vars": {"RLSIGHT_RANK": "not-a-number"}}).remote()
    try:
        assert ray.get(broken.identity.remote())["telemetry"] is False
        assert ray.get(dispatch_with_trace_context(broken.work, "still works")) == "still works"
    finally:
        ray.kill(broken)


_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=60),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=8,
)
_packed = st.binary(max_size=80) | st.text("0123456789abcdef-,=", max_size=80).map(str.encode)
_carriers = _junk | _packed | st.fixed_dictionaries(
    {"traceparent": st.text("0123456789abcdef-", max_size=60) | _junk, "tracestate": st.text(max_size=700)}
)


def test_a_decorated_actor_method_survives_any_carrier(actors: Actors) -> None:
    @settings(max_examples=40, deadline=None)
    @given(carrier=_carriers)
    def call_with(carrier: object) -> None:
        assert ray.get(actors.sync.echo.remote("ok", **{TRACE_CONTEXT_KWARG: carrier})) == "ok"

    call_with()
