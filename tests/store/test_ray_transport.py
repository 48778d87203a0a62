"""``store_transport="ray"``: every node's spans in the driver's run folder, once; a dead sink
costs counted drops from the shipping path and nothing from the workers' own files.

The two-node cluster (``ray.cluster_utils.Cluster``, two raylets) runs in a process of its own
(``_two_node_run.py``): this process may already be connected to the session's shared cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlsight import ConfigError, TelemetryConfig, setup_telemetry
from rlsight.analysis import analyze_run, analyze_spans
from rlsight.store import SpanRecord, read_spans
from rlsight.store._ray_sink import QUEUE_BATCHES, ShippingSink, StoreShipper, StoreSinkActor
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

    def test_a_sender_name_cannot_leave_the_run_folder(self, tmp_path):
        sink = StoreSinkActor(str(tmp_path / "run"))
        assert sink.append("../../evil", "traces", 1, b"{}\n")
        sink.close()
        assert [p.name for p in (tmp_path / "run" / "traces").iterdir()] == ["_.._evil.jsonl"]
        assert not (tmp_path / "evil.jsonl").exists()


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
