"""What the adoption helpers add on top of what the framework already pays.

- ``TimerBridge.wrap(marked_timer)`` against the framework's own ``marked_timer`` (a
  ``@contextmanager`` that fills a dict, as verl's does): with the label's group off, the
  bridge should add little to a timer that already costs a generator; with it on, it adds one
  span.
- ``instrument_logging()``: a ``logger.info`` that a handler formats, with and without the
  stamping record factory, inside a live span.
"""

from __future__ import annotations

import io
import logging
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import compare, emit_json, parse_args, ratio_table

import rlsight
from rlsight import RL, TelemetryConfig, TimerBridge, span


@contextmanager
def marked_timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - t0


def timers(quick: bool, groups: list[str], title: str) -> dict[str, object]:
    rlsight.setup_telemetry(TelemetryConfig(run_dir=tempfile.mkdtemp(prefix="rlsight-bench-"),
                                            span_groups=groups))
    try:
        timing_raw: dict[str, float] = {}
        bridged = TimerBridge({"gen": RL.GENERATION}).wrap(marked_timer)
        bridge = TimerBridge({"gen": RL.GENERATION})

        def plain() -> None:
            with marked_timer("gen", timing_raw):
                pass

        def wrapped() -> None:
            with bridged("gen", timing_raw):
                pass

        def own_timer() -> None:
            with bridge.time("gen", timing_raw):
                pass

        res = compare(
            {"framework marked_timer": plain, "bridge.wrap(marked_timer)": wrapped,
             "bridge.time": own_timer},
            number=2_000 if quick else 20_000, rounds=5 if quick else 15,
        )
        return ratio_table(title, res, [
            ("wrapped / framework timer", "bridge.wrap(marked_timer)", "framework marked_timer"),
            ("bridge.time / framework timer", "bridge.time", "framework marked_timer"),
        ])
    finally:
        rlsight.shutdown_telemetry()


def logs(quick: bool) -> dict[str, object]:
    from rlsight.logs import _stamping_factory

    rlsight.setup_telemetry(TelemetryConfig(run_dir=tempfile.mkdtemp(prefix="rlsight-bench-"),
                                            span_groups=["all"]))
    logger = logging.getLogger("rlsight.bench.logs")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    stamped = _stamping_factory(logging.LogRecord)
    record_args = ("rlsight.bench.logs", logging.INFO, __file__, 1, "step %d done", (3,), None)
    try:
        with span(RL.TRAINING, "rl.train.policy"):
            res = compare(
                {
                    "LogRecord(...)": lambda: logging.LogRecord(*record_args),
                    "stamping factory": lambda: stamped(*record_args),
                    "logger.info through a handler": lambda: logger.info("step %d done", 3),
                },
                number=2_000 if quick else 20_000, rounds=5 if quick else 15,
            )
        return ratio_table("logging bridge, per record, inside a live span", res, [
            ("stamping factory / LogRecord", "stamping factory", "LogRecord(...)"),
            ("stamping factory / one logger.info", "stamping factory", "logger.info through a handler"),
        ])
    finally:
        logger.removeHandler(handler)
        rlsight.shutdown_telemetry()


def main() -> None:
    args = parse_args()
    docs = [
        timers(args.quick, ["minimal"], "timer bridge, label's group off"),
        timers(args.quick, ["all"], "timer bridge, label's group on (one span per block)"),
        logs(args.quick),
    ]
    if args.json:
        emit_json(docs)


if __name__ == "__main__":
    main()
