"""Side-by-side micro-benchmarks: interleaved repeats, medians, a ratio table.

The machine is noisy (2 shared cores), so variants are never compared against a remembered
number: each round runs every variant once, in a rotating order, and the table compares
medians of the same run. ``--json`` prints the table as one JSON document instead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class Result:
    name: str
    per_op_ns: float
    spread_ns: float


def time_per_op(fn: Callable[[], object], number: int,
                clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Nanoseconds per call of ``fn`` over ``number`` calls (loop overhead included)."""
    t0 = clock()
    for _ in range(number):
        fn()
    return (clock() - t0) / number


def compare(
    variants: dict[str, Callable[[], object]],
    *,
    number: int = 20_000,
    rounds: int = 15,
    loop_overhead: bool = True,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> dict[str, Result]:
    """Run every variant ``rounds`` times, interleaved; return medians per op.

    When ``loop_overhead`` is set, the cost of calling an empty lambda is measured in the
    same rounds and subtracted, so cheap operations compare on what they do. ``clock``
    ``time.thread_time_ns`` measures the calling thread's CPU only: what an operation costs
    the thread that runs it, without the time other processes of a busy machine take.
    """
    names = list(variants)
    samples: dict[str, list[float]] = {n: [] for n in names}
    empty: list[float] = []

    def nothing() -> None:
        return None

    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            samples[name].append(time_per_op(variants[name], number, clock))
        if loop_overhead:
            empty.append(time_per_op(nothing, number, clock))
    base = statistics.median(empty) if loop_overhead else 0.0
    out = {}
    for name in names:
        med = statistics.median(samples[name]) - base
        q = statistics.quantiles(samples[name], n=4)
        out[name] = Result(name, max(med, 0.1), q[2] - q[0])
    return out


def compare_statements(
    statements: dict[str, str],
    namespace: dict[str, object],
    *,
    number: int = 100_000,
    rounds: int = 15,
) -> dict[str, Result]:
    """Like :func:`compare`, for inline statements (``timeit``): no wrapper call is measured.

    Use it for operations of a few nanoseconds, where calling a lambda would cost more than
    the operation. The cost of ``pass`` is subtracted.
    """
    import timeit

    timers = {name: timeit.Timer(stmt, globals=namespace) for name, stmt in statements.items()}
    empty = timeit.Timer("pass")
    names = list(timers)
    samples: dict[str, list[float]] = {n: [] for n in names}
    base: list[float] = []
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            samples[name].append(timers[name].timeit(number) / number * 1e9)
        base.append(empty.timeit(number) / number * 1e9)
    floor = statistics.median(base)
    out = {}
    for name in names:
        q = statistics.quantiles(samples[name], n=4)
        out[name] = Result(name, max(statistics.median(samples[name]) - floor, 0.1), q[2] - q[0])
    return out


def ratio_table(
    title: str,
    results: dict[str, Result],
    ratios: Sequence[tuple[str, str, str]],
) -> dict[str, object]:
    """Print per-op medians and the ratios ``(label, a, b)`` = a / b; return them as a dict."""
    lines = [f"## {title}"]
    for r in results.values():
        unit, scale = ("µs", 1e3) if r.per_op_ns >= 1e4 else ("ns", 1.0)
        per_op, iqr = r.per_op_ns / scale, r.spread_ns / scale
        lines.append(f"  {r.name:<44} {per_op:10.2f} {unit}/op   (IQR {iqr:.2f})")
    out_ratios = {}
    for label, a, b in ratios:
        value = results[a].per_op_ns / results[b].per_op_ns
        out_ratios[label] = round(value, 3)
        lines.append(f"  ratio {label:<38} {value:10.3f}x")
    print("\n".join(lines))
    return {"title": title, "per_op_ns": {k: v.per_op_ns for k, v in results.items()}, "ratios": out_ratios}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    return parser.parse_args(argv)


def emit_json(doc: object) -> None:
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
