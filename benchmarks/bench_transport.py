"""What the Ray store transport costs per span, next to the local store it rides on.

Each operation is one store batch of ``BATCH`` ended spans, the unit the store processor hands
over every 50 ms; the table shows the cost per batch and the lines below it per span:

* ``file``: encode the batch as one OTLP/JSON line and append it to the local file (the store);
* ``file + ship``: the same plus handing the line to the shipper, which is all the store's
  thread does for the transport (the shipper's own thread makes the Ray call);
* ``ray call``: one acknowledged call to a real sink actor on this machine carrying that line,
  the shipper thread's work per batch (off every step's path).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import compare, emit_json, parse_args, ratio_table

BATCH = 256


def _spans() -> list[object]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    for i in range(BATCH):
        with tracer.start_as_current_span("rl.train.policy", attributes={
                "rl.span_group": "training", "rl.bucket": "productive", "thread.id": 1, "rl.step": i}):
            pass
    return list(exporter.get_finished_spans())


def main() -> None:
    args = parse_args()
    import ray

    from rlsight.store._exporters import encode_spans, span_writer
    from rlsight.store._ray_sink import StoreShipper, StoreSinkActor, sink_name
    from rlsight.store._sink import FileSink

    spans = _spans()
    folder = Path(tempfile.mkdtemp(prefix="rlsight-bench-transport-"))
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        sink = ray.remote(StoreSinkActor).options(
            name=sink_name("bench"), namespace="rlsight", num_cpus=0).remote(str(folder / "sink"))
        ray.get(sink.written.remote())
        local = FileSink(folder / "local.jsonl")
        shipper = StoreShipper("bench", folder / "worker", "bench-0-1")
        write_only = span_writer(local)
        write_and_ship = span_writer(local, lambda line, n: shipper.offer("traces", line, n))
        line = encode_spans(spans)  # type: ignore[arg-type]
        seq = iter(range(10**9))

        def ray_call() -> None:
            ray.get(sink.append.remote("bench-0-1", "traces", next(seq), line))

        res = compare(
            {"file": lambda: write_only(spans),  # type: ignore[arg-type]
             "file + ship": lambda: write_and_ship(spans),  # type: ignore[arg-type]
             "ray call": ray_call},
            number=5 if args.quick else 20, rounds=5 if args.quick else 11, loop_overhead=False,
        )
        doc = ratio_table(
            f"store transport, one batch of {BATCH} spans", res,
            [("file + ship / file (the store thread's extra work)", "file + ship", "file"),
             ("ray call / file (the shipping thread's work)", "ray call", "file")],
        )
        per_span = {name: round(r.per_op_ns / BATCH / 1e3, 3) for name, r in res.items()}
        for name, us in per_span.items():
            print(f"  per span: {name:<40} {us:10.3f} µs")
        doc["per_span_us"] = per_span
        shipper.close(2.0)
        local.close()
        if args.json:
            emit_json(doc)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
