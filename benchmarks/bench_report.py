"""`rlsight report --json` end to end on a synthetic run of 1,000,000 spans across 64 ranks.

Target (issue 5): under 10 s and under 2 GiB peak RSS on the 2-core machine. Each round runs
the installed CLI in a fresh process (imports, reading, analysis, JSON out) and reads its peak
RSS from ``wait4``; the table reports medians of the rounds, spans per second and the target
verdict. The machine is shared, so the load average is printed alongside.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import emit_json, parse_args
from _synthetic_run import write_synthetic_run

TARGET_S = 10.0
TARGET_RSS_GIB = 2.0


def _run_once(run_dir: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS GiB, bytes of JSON) of one `rlsight report --json`."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "rlsight.cli", "report", str(run_dir), "--json"],
                                stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode() if proc.stderr else ""
        if proc.returncode != 0:
            raise SystemExit(f"rlsight report exited {proc.returncode}: {err}")
        size = out.tell()
    return wall, usage.ru_maxrss / 2**20, size


def main() -> None:
    args = parse_args()
    spans, rounds = (100_000, 2) if args.quick else (1_000_000, 3)
    with tempfile.TemporaryDirectory(prefix="rlsight-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        t0 = time.perf_counter()
        written = write_synthetic_run(run_dir, spans=spans, ranks=64)
        gen_s = time.perf_counter() - t0
        size_mib = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file()) / 2**20
        samples = [_run_once(run_dir) for _ in range(rounds)]
    wall = statistics.median(s[0] for s in samples)
    rss = max(s[1] for s in samples)
    ok = wall < TARGET_S and rss < TARGET_RSS_GIB
    load = os.getloadavg()[0]
    print(f"## rlsight report --json on {written} spans, 64 ranks ({size_mib:.0f} MiB of OTLP/JSON, "
          f"generated in {gen_s:.1f} s)")
    print(f"  end-to-end wall (median of {rounds})   {wall:8.2f} s      rounds: "
          + ", ".join(f"{s[0]:.2f}" for s in samples))
    print(f"  peak RSS (max of rounds)            {rss:8.2f} GiB")
    print(f"  throughput                          {written / wall / 1e3:8.0f} k spans/s")
    print(f"  JSON document                       {samples[0][2] / 2**10:8.0f} KiB")
    print(f"  target < {TARGET_S:.0f} s and < {TARGET_RSS_GIB:.0f} GiB        {'met' if ok else 'MISSED'}"
          f"   (load average {load:.1f} on {os.cpu_count()} cores)")
    if args.json:
        emit_json({"title": "rlsight report --json end to end", "spans": written, "wall_s": wall,
                   "peak_rss_gib": rss, "spans_per_s": written / wall, "target_met": ok,
                   "load_average": load})


if __name__ == "__main__":
    main()
