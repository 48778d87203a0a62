"""What carrying the trace into a Ray call costs.

Targets (issue #3): a Ray actor round trip with the carrier within 1.05x of the same round
trip without it (same actor, same run, interleaved); and the carrier of a span built once,
then reused, so a fan-out to many actors injects once.

The actor's method is decorated and does nothing, so the ratio is the propagation overhead
alone: building the kwargs on the driver, serialising one more argument, and popping,
parsing (cached) and attaching the context in the worker. Ray starts once (~7 s).

Beside the targets, reference rows send the same keyword to an undecorated ``**kwargs``
method: what Ray itself charges for one more keyword argument, whoever sends it. Ray sends a
keyword as two arguments, its name and its value, each serialised on the driver and
deserialised in the worker (msgpack, a few microseconds each), except ``bytes``, which Ray
passes through as they are. ``**trace_context_kwargs()`` and ``dispatch_with_trace_context``
send the carrier packed as bytes (issue #16); the dict form (``current_trace_carrier()``, which
``trace_context_kwargs()`` sent before) is timed beside them, so the rows show both forms.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _harness import Result, compare, emit_json, parse_args, ratio_table, time_per_op

import rlsight
from rlsight import RL, TelemetryConfig, umbrella_span
from rlsight.propagation import (
    TRACE_CONTEXT_KWARG,
    accepts_trace_context,
    current_trace_carrier,
    dispatch_with_trace_context,
    trace_context_kwargs,
)
from rlsight.runtime import active_runtime


def carrier_build(quick: bool) -> dict[str, object]:
    """First call under a span (inject) vs every later call under the same span (cache hit)."""

    runtime = active_runtime()
    assert runtime is not None
    carriers = runtime.run_state.carriers

    def first_call() -> object:
        carriers.clear()  # as if the span had just started
        return current_trace_carrier()

    with umbrella_span(RL.STEP, "rl.bench.step"):
        res = compare(
            {
                "current_trace_carrier() first call": first_call,
                "current_trace_carrier() reused": current_trace_carrier,
                "trace_context_kwargs() reused": trace_context_kwargs,
            },
            number=2_000 if quick else 20_000, rounds=5 if quick else 15,
        )
    return ratio_table(
        "carrier build: first call under a span vs reused", res,
        [("first call / reused", "current_trace_carrier() first call", "current_trace_carrier() reused")],
    )


def callee(quick: bool) -> dict[str, object]:
    """What the decorator adds in the callee, in-process: pop, parse (cached), attach, detach."""

    def plain(x: int) -> int:
        return x

    decorated = accepts_trace_context(plain)
    with umbrella_span(RL.STEP, "rl.bench.step"):
        kwargs = {TRACE_CONTEXT_KWARG: current_trace_carrier()}
        packed = trace_context_kwargs()
    res = compare(
        {
            "undecorated call": lambda: plain(1),
            "decorated call, no carrier": lambda: decorated(1),
            "decorated call, with carrier": lambda: decorated(1, **kwargs),
            "decorated call, with packed carrier": lambda: decorated(1, **packed),
        },
        number=2_000 if quick else 20_000, rounds=5 if quick else 15,
    )
    return ratio_table(
        "callee side, in-process (what a worker pays per call)", res,
        [("with carrier / undecorated", "decorated call, with carrier", "undecorated call"),
         ("with packed carrier / undecorated", "decorated call, with packed carrier", "undecorated call"),
         ("no carrier / undecorated", "decorated call, no carrier", "undecorated call")],
    )


def _packed_carrier() -> bytes:
    """The bytes dispatch_with_trace_context sends for the current span."""
    sent: dict[str, object] = {}

    class Target:
        def remote(self, *args: object, **kwargs: object) -> None:
            sent.update(kwargs)

    dispatch_with_trace_context(Target())
    value = sent[TRACE_CONTEXT_KWARG]
    assert isinstance(value, bytes)
    return value


def round_trip(config: TelemetryConfig, quick: bool) -> dict[str, object]:
    """One actor, called bare and with the carrier, interleaved; plus Ray's own cost of a kwarg.

    The reference rows send the same keyword to an undecorated ``**kwargs`` method: what Ray
    charges for one more keyword argument, whoever sends it, with each form of the carrier.
    """
    import ray

    from rlsight.ray import ray_runtime_env

    @ray.remote
    class Echo:
        @accepts_trace_context
        def ping(self, x: int) -> int:
            return x

        def plain(self, x: int, **kwargs: Any) -> int:
            return x

    ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env=ray_runtime_env(config),
             log_to_driver=False)
    try:
        actor: Any = Echo.remote()
        ray.get([actor.ping.remote(0), actor.plain.remote(0)])  # the worker is up and warm
        with umbrella_span(RL.STEP, "rl.bench.step"):
            carrier = {TRACE_CONTEXT_KWARG: current_trace_carrier()}
            packed = {TRACE_CONTEXT_KWARG: _packed_carrier()}
            variants: dict[str, Callable[[], object]] = {
                "bare": lambda: ray.get(actor.ping.remote(1)),
                "**trace_context_kwargs()": lambda: ray.get(actor.ping.remote(1, **trace_context_kwargs())),
                "dispatch_with_trace_context": lambda: ray.get(dispatch_with_trace_context(actor.ping, 1)),
                "dict carrier (before #16)": lambda: ray.get(
                    actor.ping.remote(1, **{TRACE_CONTEXT_KWARG: current_trace_carrier()})),
                "ref: undecorated, bare": lambda: ray.get(actor.plain.remote(1)),
                "ref: undecorated, same kwarg": lambda: ray.get(actor.plain.remote(1, **carrier)),
                "ref: undecorated, same kwarg packed": lambda: ray.get(actor.plain.remote(1, **packed)),
            }
            # Many short rounds: the shared machine's load drifts, and interleaving follows it.
            samples = _interleaved(variants, number=20 if quick else 40, rounds=5 if quick else 31)
            costs = _argument_costs(quick)
    finally:
        ray.shutdown()
    pairs = [
        ("with carrier kwargs / bare (target < 1.05)", "**trace_context_kwargs()", "bare"),
        ("dispatch_with_trace_context / bare (target < 1.05)", "dispatch_with_trace_context", "bare"),
        ("ref: dict carrier / bare", "dict carrier (before #16)", "bare"),
        ("ref: one more kwarg (dict), undecorated", "ref: undecorated, same kwarg",
         "ref: undecorated, bare"),
        ("ref: one more kwarg (packed), undecorated", "ref: undecorated, same kwarg packed",
         "ref: undecorated, bare"),
    ]
    doc = ratio_table(
        "Ray actor round trip, ray.get(actor.ping.remote(1)), same actor", _medians(samples), pairs
    )
    paired = {}
    for label, a, b in pairs:
        value = statistics.median(x / y for x, y in zip(samples[a], samples[b], strict=True))
        paired[label] = round(value, 3)
        print(f"  paired {label:<44} {value:8.3f}x  (median of per-round ratios)")
    doc["paired_ratios"] = paired
    if costs is not None:
        doc["argument_costs"] = ratio_table(
            "where one more keyword goes: the Python half of a Ray call, per piece (CPU of the "
            "calling thread; the wall ratios above are noisy on a shared machine, these are not)",
            costs,
            [("serialise: dict carrier / packed", "driver: serialise dict carrier",
              "driver: serialise packed carrier"),
             ("deserialise: dict carrier / packed", "worker: deserialise dict carrier",
              "worker: deserialise packed carrier")],
        )
    return doc


def _argument_costs(quick: bool) -> dict[str, Result] | None:
    """What one more keyword costs Ray's Python code on each side, for each form of the carrier.

    Ray sends a keyword as two arguments (its name, then its value), serialises each on the
    caller and deserialises each in the worker; these are those steps, timed one by one with
    Ray's own serialisation context, plus the decorated callee's own work. They read Ray
    internals, so a Ray that moved them skips the table rather than the benchmark.
    """
    import ray

    try:
        worker = ray._private.worker.global_worker
        context = worker.get_serialization_context()

        def stored(value: object) -> tuple[object, object]:
            data, metadata = worker.core_worker.get_objects([ray.put(value)], -1)[0][:2]
            return data, metadata

        def deserialise(value: object) -> Callable[[], object]:
            data, metadata = stored(value)
            return lambda: context._deserialize_object(data, metadata, None, None)

        def plain(x: int) -> int:
            return x

        decorated = accepts_trace_context(plain)
        with umbrella_span(RL.STEP, "rl.bench.step"):
            carrier = current_trace_carrier()
            packed = _packed_carrier()
            dict_kwargs = {TRACE_CONTEXT_KWARG: carrier}
            packed_kwargs = {TRACE_CONTEXT_KWARG: packed}
            pieces: dict[str, Callable[[], object]] = {
                "driver: trace_context_kwargs()": trace_context_kwargs,
                "driver: serialise the keyword's name": lambda: context.serialize(TRACE_CONTEXT_KWARG),
                "driver: serialise dict carrier": lambda: context.serialize(carrier),
                "driver: serialise packed carrier": lambda: context.serialize(packed),
                "worker: deserialise the keyword's name": deserialise(TRACE_CONTEXT_KWARG),
                "worker: deserialise dict carrier": deserialise(carrier),
                "worker: deserialise packed carrier": deserialise(packed),
                "worker: decorated call, no carrier": lambda: decorated(1),
                "worker: decorated call, dict carrier": lambda: decorated(1, **dict_kwargs),
                "worker: decorated call, packed carrier": lambda: decorated(1, **packed_kwargs),
            }
            for piece in pieces.values():
                piece()
    except Exception as exc:  # Ray internals moved: the round-trip figures above still stand
        print(f"  (per-piece costs skipped: {type(exc).__name__}: {exc})")
        return None
    return compare(pieces, number=500 if quick else 5_000, rounds=5 if quick else 9,
                   clock=time.thread_time_ns)


def _interleaved(
    variants: dict[str, Callable[[], object]], *, number: int, rounds: int
) -> dict[str, list[float]]:
    """Per-round ns/op of each variant, the order rotating every round.

    Kept per round (not only as medians) so a ratio can also be taken within each round,
    which cancels the drift between rounds on a shared machine.
    """
    names = list(variants)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            samples[name].append(time_per_op(variants[name], number))
    return samples


def _medians(samples: dict[str, list[float]]) -> dict[str, Result]:
    out = {}
    for name, values in samples.items():
        q = statistics.quantiles(values, n=4)
        out[name] = Result(name, statistics.median(values), q[2] - q[0])
    return out


def main() -> None:
    args = parse_args()
    config = TelemetryConfig(run_dir=tempfile.mkdtemp(prefix="rlsight-bench-"), span_groups=["all"])
    rlsight.setup_telemetry(config)
    # With --json, the tables go to stderr so stdout holds the one JSON document.
    tables = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    try:
        with tables:
            docs = [carrier_build(args.quick), callee(args.quick), round_trip(config, args.quick)]
    finally:
        rlsight.shutdown_telemetry()
    if args.json:
        emit_json(docs)


if __name__ == "__main__":
    main()
