"""What a live span (one that gets a start record) costs next to an ordinary enabled span.

Target (issue #13): a live span costs at most 1.3x an ordinary enabled span, in the caller.
The caller pays an attribute check and a dict set and pop; the record is encoded and written
on the live writer's thread, and only for spans still open when it writes (a span that ended
within the 50 ms interval needs no start record). Both halves are measured: the span as the
caller sees it (both kinds through the same local store), and the background write of one
start record for a span that is still open, against the same ordinary span.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import compare, emit_json, parse_args, ratio_table

import rlsight
from rlsight import RL, TelemetryConfig, span


def main() -> None:
    args = parse_args()
    from rlsight.store._sink import FileSink
    from rlsight.store._start_writer import start_lines

    run_dir = tempfile.mkdtemp(prefix="rlsight-bench-")
    tel = rlsight.setup_telemetry(TelemetryConfig(run_dir=run_dir, span_groups=["all"]))
    try:
        def ordinary() -> None:  # reward is not a long-lived kind: no start record
            with span(RL.REWARD, "rl.reward.score"):
                pass

        def live_group() -> None:  # training is: the span is filed for a start record
            with span(RL.TRAINING, "rl.train.policy"):
                pass

        def live_flag() -> None:
            with span(RL.REWARD, "rl.reward.score", live=True):
                pass

        # The background half: encoding and writing start records of spans still open.
        sink = FileSink(Path(run_dir) / "bench-live.jsonl")
        open_spans = [tel.tracer.start_span("rl.train.policy",
                                            attributes={"rl.span_group": "training", "thread.id": 1})
                      for _ in range(64)]

        def write_open_starts() -> None:
            sink.write(start_lines(open_spans))  # type: ignore[arg-type]

        number = 300 if args.quick else 2_000
        res = compare(
            {"ordinary enabled span": ordinary, "live span (training group)": live_group,
             "live span (live=True)": live_flag},
            number=number, rounds=5 if args.quick else 15, loop_overhead=False,
        )
        batch = compare({"write 64 open start records": write_open_starts},
                        number=max(10, number // 20), rounds=5 if args.quick else 15,
                        loop_overhead=False)
        per_record = batch["write 64 open start records"]
        res["start record write, per record (store thread)"] = type(per_record)(
            "start record write, per record (store thread)", per_record.per_op_ns / 64,
            per_record.spread_ns / 64)
        doc = ratio_table(
            "live span vs ordinary enabled span (local store)", res,
            [
                ("live span / ordinary (target <= 1.3)", "live span (training group)",
                 "ordinary enabled span"),
                ("live=True span / ordinary (target <= 1.3)", "live span (live=True)",
                 "ordinary enabled span"),
                ("background write per record / ordinary span",
                 "start record write, per record (store thread)", "ordinary enabled span"),
            ],
        )
        for s in open_spans:
            s.end()
        sink.close()
    finally:
        rlsight.shutdown_telemetry()
    if args.json:
        emit_json([doc])


if __name__ == "__main__":
    main()
