"""``store_transport="ray"``: every node's spans in the driver's run folder, once; a dead sink
costs counted drops from the shipping path and nothing from the workers' own files.

The two-node cluster (``ray.cluster_utils.Cluster``, two raylets) runs in a process of its own
(``_two_node_run.py``): this process may already be connected to the session's shared cluster.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight import ConfigError, TelemetryConfig, setup_telemetry
from rlsight.analysis import analyze_run, analyze_spans
from rlsight.store import SpanRecord, read_spans
from rlsight.store._live import alive_line, shutdown_line
from rlsight.store._ray_sink import (
    LIVE_BATCHES,
    QUEUE_BATCHES,
    ShippingSink,
    ShipQueue,
    StoreShipper,
    StoreSinkActor,
)
from rlsight.store._sink import FileSink

_SCRIPT = Path(__file__).with_name("_two_node_run.py")
_COMPARED = ("steps", "step_summary", "top", "fleets", "span_steps", "top_spans", "stragglers",
             "startup", "volume")


@pytest.fixture(scope="module")
def two_node(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("two-node")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RLSIGHT_"))}
    done = subprocess.run([sys.executable, str(_SCRIPT), str(root)], capture_output=True, text=True,
                          timeout=170, env=env, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return root, {r["run"]: r for r in runs}


def _ids(spans: list[SpanRecord]) -> list[tuple[str, str]]:
    return [(s.trace_id, s.span_id) for s in spans]


def _train_spans(folder: Path, rank: int) -> list[SpanRecord]:
    return [s for s in read_spans(folder).spans
            if s.name == "rl.train.policy" and s.resource.get("rl.rank") == rank]


class TestWholeRun:
    def test_the_far_worker_ran_on_the_second_node(self, two_node):
        _, runs = two_node
        far, near = runs["whole"]["nodes"]
        assert near == runs["whole"]["driver_node"] != far

    def test_every_span_of_the_run_is_in_the_driver_folder_exactly_once(self, two_node):
        root, _ = two_node
        driver = read_spans(root / "whole" / "driver").spans
        node2 = read_spans(root / "whole" / "node2").spans
        assert len(_ids(driver)) == len(set(_ids(driver)))
        assert set(_ids(driver)) == set(_ids(driver)) | set(_ids(node2))
        assert len(_train_spans(root / "whole" / "driver", 1)) == 5

    def test_the_report_equals_the_report_of_the_union_of_both_roots(self, two_node):
        root, _ = two_node
        union = {(s.trace_id, s.span_id): s for folder in ("driver", "node2")
                 for s in read_spans(root / "whole" / folder).spans}
        direct = analyze_run(root / "whole" / "driver").to_dict()
        merged = analyze_spans(union.values()).to_dict()
        for key in _COMPARED:
            assert direct[key] == merged[key], key
        assert direct["summary"]["buckets"] == merged["summary"]["buckets"]
        assert direct["summary"]["spans"] == merged["summary"]["spans"]
        assert not any("duplicate" in n for n in direct["notes"])

    def test_the_far_workers_start_records_reach_the_driver_folder(self, two_node):
        root, _ = two_node
        shipped = [p for p in (root / "whole" / "driver" / "live").glob("policy-1-*.jsonl")]
        local = list((root / "whole" / "node2" / "live").glob("policy-1-*.jsonl"))
        assert len(shipped) == len(local) == 1
        assert shipped[0].read_text() == local[0].read_text()

    def test_a_worker_that_writes_the_driver_folder_ships_nothing(self, two_node):
        _, runs = two_node
        near = runs["whole"]["near"]
        assert near["exported"].get("ray", 0) == 0 and near["dropped"] == {}
        assert runs["whole"]["far"]["exported"]["ray"] == 5
        assert runs["whole"]["far"]["dropped"] == {}


class TestKilledSink:
    def test_the_workers_own_files_keep_every_span(self, two_node):
        root, _ = two_node
        assert len(_train_spans(root / "killed" / "node2", 1)) == 5

    def test_every_span_is_shipped_or_counted_as_dropped(self, two_node):
        root, runs = two_node
        far = runs["killed"]["far"]
        shipped = far["exported"]["ray"]
        lost = sum(n for reason, n in far["dropped"].items() if reason.startswith("ray/"))
        assert 0 < shipped < 5 and shipped + lost == far["exported"]["store"] == 5
        # Which reason depends on timing: the shipper may see the dead sink before shutdown
        # (sink_dead, timeout) or still be waiting on it when shutdown's budget runs out.
        assert set(far["dropped"]) <= {"ray/sink_dead", "ray/timeout", "ray/shutdown_timeout"}
        assert len(_train_spans(root / "killed" / "driver", 1)) == shipped


class TestShipper:
    def test_a_full_queue_drops_the_oldest_and_shutdown_counts_the_rest(self, tmp_path):
        shipper = StoreShipper("no-such-run", tmp_path, "w-0-1")
        for _ in range(QUEUE_BATCHES + 3):
            shipper.offer("traces", b"{}\n", 2)
        shipper.close(0.0)
        assert shipper.dropped["queue_full"] == 6
        assert shipper.dropped["queue_full"] + shipper.dropped["shutdown_timeout"] == 2 * (QUEUE_BATCHES + 3)
        shipper.offer("traces", b"{}\n", 1)
        assert shipper.dropped["after_shutdown"] == 1

    def test_a_shipping_sink_writes_locally_first_then_queues_the_same_bytes(self, tmp_path):
        shipper = StoreShipper("no-such-run", tmp_path, "w-0-1")
        sink = ShippingSink(FileSink(tmp_path / "live" / "w.jsonl"), shipper, "live")
        sink.write(b'{"process":1}\n')
        sink.close()
        assert (tmp_path / "live" / "w.jsonl").read_bytes() == b'{"process":1}\n'
        shipper.close(0.0)
        assert shipper.dropped == {}  # a start-record line counts no span

    def test_a_process_writing_the_driver_folder_ships_nothing(self, tmp_path):
        (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "r1", "store_format": 1}))
        shipper = StoreShipper("r1", tmp_path, "w-0-1")
        shipper.offer("traces", b"{}\n", 3)
        shipper.close(0.0)
        assert shipper.same_folder and shipper.dropped == {}

    def test_the_sink_writes_a_retried_batch_once(self, tmp_path):
        sink = StoreSinkActor(str(tmp_path))
        assert sink.append("w-0-1-host", "traces", 1, b'{"a":1}\n')
        assert not sink.append("w-0-1-host", "traces", 1, b'{"a":1}\n')
        assert sink.append("w-0-1-host", "traces", 2, b'{"b":2}\n')
        sink.close()
        assert (tmp_path / "traces" / "w-0-1-host.jsonl").read_text() == '{"a":1}\n{"b":2}\n'
        with pytest.raises(ValueError, match=r"store kind '\.\./x' is not a folder name"):
            sink.append("w", "../x", 3, b"{}\n")

    def test_the_sink_writes_each_batch_of_one_call_once(self, tmp_path):
        sink = StoreSinkActor(str(tmp_path))
        calls = [("live", 1, b'{"record":"alive","timeUnixNano":"1"}\n'), ("traces", 2, b'{"a":1}\n')]
        assert sink.append_all("w", calls) == 2
        assert sink.append_all("w", calls) == 0  # a retried call
        sink.close()
        assert (tmp_path / "traces" / "w.jsonl").read_text() == '{"a":1}\n'
        assert (tmp_path / "live" / "w.jsonl").read_text() == '{"record":"alive","timeUnixNano":"1"}\n'

    def test_a_sender_name_cannot_leave_the_run_folder(self, tmp_path):
        sink = StoreSinkActor(str(tmp_path / "run"))
        assert sink.append("../../evil", "traces", 1, b"{}\n")
        sink.close()
        assert [p.name for p in (tmp_path / "run" / "traces").iterdir()] == ["_.._evil.jsonl"]
        assert not (tmp_path / "evil.jsonl").exists()


class TestShipQueue:
    """The shipper's queue without Ray: live-file writes apart from span batches."""

    def test_a_flood_of_span_batches_drops_counted_spans_never_a_live_write(self):
        dropped: collections.Counter[str] = collections.Counter()
        queue = ShipQueue(dropped)
        start = b'{"record":"start","spanId":"00000000000000ab"}\n'
        queue.put("live", start, 0)
        queue.put("heartbeats", alive_line(), 0)
        for i in range(QUEUE_BATCHES + 5):
            queue.put("traces", b'{"n":%d}\n' % i, 3)
        assert dropped == {"queue_full": 15}
        calls, spans = queue.take()  # the live write rides in the oldest batch's call
        assert [(kind, data) for kind, _, data in calls][::2] == [("live", start), ("traces", b'{"n":5}\n')]
        assert calls[1][0] == "heartbeats"
        assert spans == 3
        assert queue.clear() == 3 * (QUEUE_BATCHES - 1)

    def test_a_live_write_waits_for_a_span_batch_to_ride_with(self):
        """A busy worker's heartbeats cost no actor call of their own (2,000 workers made 200
        calls a second); one with nothing else to send goes alone after ``hold_live_s``."""
        queue = ShipQueue(collections.Counter())
        beat = alive_line()
        queue.put("heartbeats", beat, 0)
        assert queue.take(hold_live_s=60.0) == ([], 0)
        queue.put("traces", b"{}\n", 2)
        calls, spans = queue.take(hold_live_s=60.0)
        assert [data for _, _, data in calls] == [beat, b"{}\n"] and spans == 2
        queue.put("heartbeats", beat, 0)
        assert [data for _, _, data in queue.take(hold_live_s=0.0)[0]] == [beat]

    def test_a_start_record_or_shutdown_line_never_waits_for_a_batch(self):
        """The driver stops its sink 0.3 s after the last line arrives: a start record held for
        a batch to ride with was lost when a worker entered the span it then hung in."""
        queue = ShipQueue(collections.Counter())
        queue.put("heartbeats", alive_line(), 0)
        queue.put("live", b'{"record":"start","spanId":"00000000000000ab"}\n', 0)
        assert [kind for kind, _, _ in queue.take(hold_live_s=60.0)[0]] == ["heartbeats", "live"]
        queue.put("live", shutdown_line(), 0)
        assert [kind for kind, _, _ in queue.take(hold_live_s=60.0)[0]] == ["live"]

    def test_a_full_live_queue_keeps_the_process_line_every_later_line_needs(self):
        queue = ShipQueue(collections.Counter())
        process = b'{"record":"process","timeUnixNano":"1","heartbeatS":10.0,"resource":{}}\n'
        queue.put("live", process, 0)
        starts = [b'{"record":"start","spanId":"%016x"}\n' % i for i in range(LIVE_BATCHES + 10)]
        for data in starts:
            queue.put("live", data, 0)
        calls, _ = queue.take()
        assert len(calls) == LIVE_BATCHES and calls[0][2] == process
        assert [data for _, _, data in calls[1:]] == starts[-(LIVE_BATCHES - 1):]

    def test_a_heartbeat_waiting_gives_way_to_the_next_one(self):
        queue = ShipQueue(collections.Counter())
        beats = [alive_line() for _ in range(3)]
        start = b'{"record":"start","spanId":"00000000000000ab"}\n'
        queue.put("heartbeats", beats[0], 0)
        queue.put("live", start, 0)
        queue.put("heartbeats", beats[1], 0)  # replaces the one waiting
        queue.put("live", start, 0)
        queue.put("heartbeats", beats[2], 0)
        bye = shutdown_line()
        queue.put("live", bye, 0)
        calls, spans = queue.take()
        assert [(kind, data) for kind, _, data in calls] == [
            ("live", start), ("live", start), ("heartbeats", beats[2]), ("live", bye)]
        assert spans == 0 and queue.take() == ([], 0)

    def test_a_refused_call_keeps_its_live_writes_ahead_of_newer_ones(self):
        queue = ShipQueue(collections.Counter())
        queue.put("live", b'{"record":"start","spanId":"00000000000000ab"}\n', 0)
        queue.put("traces", b"{}\n", 1)
        calls, _ = queue.take()
        queue.put("live", shutdown_line(), 0)
        assert queue.keep_live(calls)  # it carried a span batch: that one is counted lost
        assert [kind for kind, _, _ in queue.take()[0]] == ["live", "live"]
        queue.put("heartbeats", alive_line(), 0)
        assert not queue.keep_live(queue.take()[0])  # live lines only

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(["traces", "metrics", "live", "beat"]), st.integers(0, 5)),
                    max_size=LIVE_BATCHES // 10 - 1),
           st.integers(0, 2 * QUEUE_BATCHES))
    def test_every_span_offered_is_taken_or_counted_and_every_start_record_is_taken(self, offers, flood):
        """Ten rounds of ``offers``, each followed by a tenth of ``flood`` one-span batches."""
        dropped: collections.Counter[str] = collections.Counter()
        queue = ShipQueue(dropped)
        offered, records = 0, []
        for round_ in range(10):
            for i, (kind, spans) in enumerate(offers):
                data = b'{"n":"%d-%d"}\n' % (round_, i)
                if kind == "beat":
                    queue.put("heartbeats", alive_line(), 0)
                elif kind == "live":
                    queue.put("live", data, 0)
                    records.append(data)
                else:
                    queue.put(kind, data, spans)
                    offered += spans
            for _ in range(flood // 10):
                queue.put("traces", b"{}\n", 1)
                offered += 1
        taken, shipped_records = 0, []
        while True:
            calls, spans = queue.take()
            if not calls:
                break
            taken += spans
            shipped_records += [data for kind, _, data in calls if kind == "live"]
        assert taken + dropped["queue_full"] == offered
        assert shipped_records == records


class TestConfig:
    def test_an_unknown_transport_is_refused_naming_the_choices(self):
        with pytest.raises(ConfigError, match="store_transport='nfs': expected 'file' or 'ray'"):
            TelemetryConfig(store_transport="nfs")  # type: ignore[arg-type]

    def test_the_transport_reaches_workers_through_the_env(self):
        config = TelemetryConfig(store_transport="ray")
        assert TelemetryConfig.from_env(config.to_env()).store_transport == "ray"

    def test_ray_transport_without_a_local_store_is_a_setup_error(self, tmp_path):
        with pytest.raises(ConfigError, match="store_transport='ray' ships what each process's local"):
            setup_telemetry(TelemetryConfig(store_transport="ray", local_store=False,
                                            run_dir=str(tmp_path)))


def test_live_lines_outlive_a_flood_of_spans_and_a_waiting_heartbeat_gives_way_to_the_next(
    ray_cluster, tmp_path,
):
    """A worker whose queue overflows with span batches (here: queued while the sink did not
    exist yet) still ships its start record, its latest heartbeat and its shutdown line; the
    spans dropped for room are counted, the rest shipped. (The heartbeats and start records
    were the oldest entries, dropped first and uncounted: `watch` then read a busy worker as
    silent.)"""
    import time

    import ray

    from rlsight.store._ray_sink import _start_sink

    run_id = f"flood-{os.getpid()}"
    shipper = StoreShipper(run_id, tmp_path / "worker", "w-0-1")
    start = b'{"record":"start","spanId":"00000000000000ab"}\n'
    first, second, last, bye = alive_line(), alive_line(), alive_line(), shutdown_line()
    shipper.offer("live", start, 0)
    shipper.offer("heartbeats", first, 0)
    shipper.offer("heartbeats", second, 0)
    for i in range(QUEUE_BATCHES + 10):
        shipper.offer("traces", b'{"n":%d}\n' % i, 2)
    shipper.offer("heartbeats", last, 0)
    shipper.offer("live", bye, 0)
    sink = _start_sink(run_id, str(tmp_path / "driver"))
    try:
        deadline = time.monotonic() + 30
        while shipper.shipped < 2 * QUEUE_BATCHES and time.monotonic() < deadline:
            time.sleep(0.05)
        shipper.close(10.0)
        ray.get(sink.close.remote())
    finally:
        ray.kill(sink)
    folder = tmp_path / "driver"
    assert (folder / "live" / f"{shipper.sender}.jsonl").read_bytes() == start + bye
    assert (folder / "heartbeats" / f"{shipper.sender}.jsonl").read_bytes() == last
    traces = (folder / "traces" / f"{shipper.sender}.jsonl").read_bytes()
    assert traces == b"".join(b'{"n":%d}\n' % i for i in range(10, QUEUE_BATCHES + 10))
    assert shipper.dropped == {"queue_full": 20} and shipper.shipped == 2 * QUEUE_BATCHES


def test_close_keeps_its_timeout_against_a_sink_that_takes_calls_and_never_answers(ray_cluster, tmp_path):
    """A sink hung on its disk: close(1.0) sent every queued batch, waiting 2 s for each 8th
    call (14 batches: 14 s; a full queue: half an hour). What it could not ship is counted."""
    import time

    import ray

    from rlsight.store._ray_sink import SINK_NAMESPACE, sink_name

    @ray.remote
    class HungSink:
        def append_all(self, sender: str, calls: Any) -> bool:
            time.sleep(3600)
            return True

    run_id = f"hung-{os.getpid()}"
    sink = HungSink.options(name=sink_name(run_id), namespace=SINK_NAMESPACE,
                            max_concurrency=64).remote()
    try:
        shipper = StoreShipper(run_id, tmp_path / "worker", "w-0-1")
        # The batches wait for close() to send them, as when the shipping thread had just
        # seen its stop and ended: close() ships what is left itself.
        shipper._stop.set()
        shipper._thread.join()
        shipper._stop.clear()
        for i in range(40):
            shipper.offer("traces", b'{"n":%d}\n' % i, 1)
        began = time.monotonic()
        shipper.close(1.0)
        took = time.monotonic() - began
    finally:
        ray.kill(sink)
    assert took < 1.0 + 2.0  # the budget, plus one wait already under way (it took 2 s a call)
    assert shipper.shipped == 0 and sum(shipper.dropped.values()) == 40


def test_the_sink_refuses_a_batch_delivered_twice_and_remembers_a_bounded_number(tmp_path):
    """The sink kept every sequence number it ever saw (~120 MiB a day per sender and kind at a
    batch every 50 ms); it keeps the last SEEN_KEPT and a floor below them."""
    from rlsight.store._ray_sink import SEEN_KEPT

    sink = StoreSinkActor(str(tmp_path))
    n = 3 * SEEN_KEPT
    assert all(sink.append("w", "traces", seq, b"%d\n" % seq) for seq in range(0, 2 * n, 2))
    assert not sink.append("w", "traces", 2 * n - 2, b"again\n")  # the newest, delivered twice
    assert not sink.append("w", "traces", 0, b"again\n")  # long behind: below the floor
    assert sink.append("w", "traces", 2 * n + 1, b"new\n") and sink.append("w", "metrics", 0, b"m\n")
    seen = sink._seen[("w", "traces")]
    assert len(seen.recent) == len(seen.order) == SEEN_KEPT
    sink.close()
    lines = (tmp_path / "traces" / "w.jsonl").read_bytes().split()
    assert lines == [b"%d" % seq for seq in range(0, 2 * n, 2)] + [b"new"]


def test_the_sink_keeps_a_bounded_number_of_files_open_and_loses_no_line(tmp_path, monkeypatch):
    """Four files a sender (traces, metrics, live, heartbeats): a thousand workers would pass
    the usual limit of 1,024 open files. The least recently written is closed and reopened."""
    import rlsight.store._ray_sink as ray_sink

    monkeypatch.setattr(ray_sink, "SINK_OPEN_FILES", 3)
    sink = ray_sink.StoreSinkActor(str(tmp_path))
    fds = len(os.listdir("/proc/self/fd"))
    seq = 0
    for round_ in range(4):
        for sender in ("a", "b", "c", "d", "e"):
            for kind in ("traces", "heartbeats"):
                seq += 1
                assert sink.append(sender, kind, seq, b"%s %d\n" % (sender.encode(), round_))
                assert len(sink._sinks) <= 3
    assert len(os.listdir("/proc/self/fd")) <= fds + 3
    sink.close()
    for sender in ("a", "b", "c", "d", "e"):
        for kind in ("traces", "heartbeats"):
            lines = (tmp_path / kind / f"{sender}.jsonl").read_text().splitlines()
            assert lines == [f"{sender} {r}" for r in range(4)]
