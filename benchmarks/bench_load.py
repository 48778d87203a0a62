"""Sustained load: does the store writer keep up, and what does a stalled collector cost?

Two measurements, each in one run so the numbers compare side by side (issue #11 items 2, 13):

1. **Writer vs app.** Four threads emit spans as fast as they can into the local store. The
   table gives the rate the app produced, the rate the writer put on disk, their ratio (1.0:
   it kept up), the writer's lag (how long ago the oldest unwritten span ended, sampled every
   10 ms) and drops by reason. Target: ratio 1.0 with no drops, lag p99 < 200 ms on an idle
   2-core machine (on a shared one the lag grows with the load average; the 1 s bound holds).
2. **Stalled collector.** The same four threads for 30 s (5 s with ``--quick``), the OTLP
   exporter pointed at a server on 127.0.0.1 that accepts connections and never answers:
   app-thread cost per span (p50/p99, every 16th span timed), peak RSS of the process, writer
   lag and drops by reason.

Each measurement runs in a fresh child process, so peak RSS is its own.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import emit_json, parse_args

_CHILD = textwrap.dedent("""
    import json, resource, statistics, sys, threading, time
    from rlsight import TelemetryConfig, setup_telemetry
    from rlsight.spans import span

    run_dir, seconds, endpoint, protocol = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
    config = TelemetryConfig(run_dir=run_dir, span_groups=("all",), shutdown_timeout_ms=2000,
                             otlp_endpoint=endpoint or None, otlp_protocol=protocol)
    telemetry = setup_telemetry(config)
    procs = {p.name: p for p in telemetry._processors}
    store = procs["store"]
    stop = threading.Event()
    produced = [0] * 4
    costs = [[] for _ in range(4)]

    def work(w):
        n, timed, clock = 0, costs[w], time.perf_counter_ns
        while not stop.is_set():
            if n % 16 == 0:
                t0 = clock()
                with span("generation", "rl.bench.load", seq=n):
                    pass
                timed.append(clock() - t0)
            else:
                with span("generation", "rl.bench.load", seq=n):
                    pass
            n += 1
        produced[w] = n

    def behind_ms(now):
        # How long ago the oldest span the writer has not written ended (its on_end rule).
        oldest = store.oldest_waiting_ns()
        return (now - oldest) / 1e6 if oldest else 0.0

    lags = []
    # Daemon threads: a failure in this thread must end the child, not leave it spinning.
    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    while time.monotonic() - t0 < seconds:
        time.sleep(0.01)
        lags.append(behind_ms(time.time_ns()))
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    # Taken or queued by the writer: it writes what it holds within its next 50 ms cycle.
    written = store.exported + store.queued + store.in_flight
    report = telemetry.shutdown()
    all_costs = sorted(c for part in costs for c in part)
    q = statistics.quantiles(all_costs, n=100, method="inclusive")
    print(json.dumps({
        "produced_per_s": sum(produced) / elapsed,
        "written_per_s": written / elapsed,
        "lag_p50_ms": statistics.median(lags),
        "lag_p99_ms": statistics.quantiles(lags, n=100, method="inclusive")[98],
        "lag_max_ms": max(lags),
        "span_cost_p50_us": q[49] / 1e3, "span_cost_p99_us": q[98] / 1e3,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "dropped": dict(report.dropped),
    }))
""")


def _stalled_server() -> tuple[str, threading.Event]:
    """A TCP server that accepts connections and never answers (a hung collector)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    done = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
        for conn in held:
            conn.close()
        server.close()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}", done


def _run(seconds: float, endpoint: str = "", protocol: str = "http/protobuf") -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(Path(tmp) / "run"), str(seconds), endpoint, protocol],
            capture_output=True, text=True, check=True, timeout=seconds + 120,
        )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _print(title: str, r: dict[str, object]) -> None:
    produced, written = float(r["produced_per_s"]), float(r["written_per_s"])  # type: ignore[arg-type]
    print(f"## {title}")
    print(f"  app produced                {produced:12,.0f} spans/s")
    print(f"  store writer wrote          {written:12,.0f} spans/s")
    print(f"  ratio writer / app          {written / produced:12.3f}x")
    print(f"  writer lag p50 / p99 / max  {r['lag_p50_ms']:8.1f} / {r['lag_p99_ms']:.1f} / "
          f"{r['lag_max_ms']:.1f} ms")
    print(f"  app cost per span p50 / p99 {r['span_cost_p50_us']:8.1f} / {r['span_cost_p99_us']:.1f} µs")
    print(f"  peak RSS                    {r['peak_rss_mib']:12.0f} MiB")
    print(f"  dropped                     {r['dropped'] or 'none'}")


def main() -> None:
    args = parse_args()
    keep_up = _run(2.0 if args.quick else 5.0)
    endpoint, done = _stalled_server()
    try:
        stalled = _run(5.0 if args.quick else 30.0, endpoint)
    finally:
        done.set()
    if args.json:
        emit_json({"writer_vs_app": keep_up, "stalled_collector": stalled})
        return
    _print("store writer vs app: 4 threads flat out, local store only", keep_up)
    _print(f"stalled collector: 4 threads flat out, OTLP to a server that never answers "
           f"({'5' if args.quick else '30'} s)", stalled)


if __name__ == "__main__":
    main()
