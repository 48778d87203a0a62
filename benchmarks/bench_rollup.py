"""The goodput rollup alone on a 1,000,000-span run: vectorised numpy vs a per-span Python loop.

Both compute every timeline's partition (deepest active bucketed span wins) and each step's
bucket sums from the same span table; the answers are checked equal before timing. The
table is built once (reading and canonicalising are measured in bench_report.py).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
from _harness import compare, emit_json, parse_args, ratio_table
from _naive_rollup import naive_rollup
from _synthetic_run import write_synthetic_run

from rlsight.analysis._read import read_span_columns
from rlsight.analysis._steps import find_steps
from rlsight.analysis._table import build_table
from rlsight.analysis.columns import BUCKET_CODES
from rlsight.analysis.goodput import label_sums, partition_timelines, step_buckets


def main() -> None:
    args = parse_args()
    spans = 100_000 if args.quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="rlsight-bench-") as tmp:
        t0 = time.perf_counter()
        written = write_synthetic_run(Path(tmp) / "run", spans=spans, ranks=64)
        cols, _, _ = read_span_columns(Path(tmp) / "run")
        table = build_table(cols)
        steps = find_steps(table)
        print(f"# {written} spans, {len(table.timelines)} timelines, {len(steps)} steps "
              f"(generated and read in {time.perf_counter() - t0:.1f} s)")

    def vectorised() -> tuple[list[list[int]], dict[int, list[int]]]:
        part = partition_timelines(table, steps)
        per_step = [[b.get(name) for name in BUCKET_CODES] for b in step_buckets(part, steps)]
        sums = label_sums(part.cover, part.label, len(table.timelines))
        return per_step, {tl: sums[tl].tolist() for tl in np.flatnonzero(sums.sum(axis=1))}

    fast, slow = vectorised(), naive_rollup(table, steps)
    if fast != (slow[0], {tl: v for tl, v in slow[1].items() if any(v)}):
        raise SystemExit("vectorised and naive rollups disagree; the benchmark would be meaningless")
    results = compare({"rollup (numpy, rlsight)": vectorised,
                       "rollup (per-span Python heap sweep)": lambda: naive_rollup(table, steps)},
                      number=1, rounds=2 if args.quick else 7, loop_overhead=False)
    doc = ratio_table(f"goodput rollup on {written} spans",
                      results, [("python loop / numpy", "rollup (per-span Python heap sweep)",
                                 "rollup (numpy, rlsight)")])
    rate = written / (results["rollup (numpy, rlsight)"].per_op_ns / 1e9)
    print(f"  rollup throughput {rate / 1e6:.2f} M spans/s")
    if args.json:
        emit_json({**doc, "spans": written, "spans_per_s": rate})


if __name__ == "__main__":
    main()
