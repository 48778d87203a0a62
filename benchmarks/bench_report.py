"""`rlsight report --json` end to end on a synthetic run of 1,000,000 spans across 64 ranks.

Target (issue 5): under 10 s and under 2 GiB peak RSS on the 2-core machine. Each round runs
the installed CLI in a fresh process (imports, reading, analysis, JSON out); peak memory is the
resident set of the whole process tree (the CLI and the reader's worker process), sampled
every 50 ms. The table reports medians of the rounds, spans per second and the target
verdict. The machine is shared, so the load average is printed alongside.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import emit_json, parse_args
from _synthetic_run import write_synthetic_run

TARGET_S = 10.0
TARGET_RSS_GIB = 2.0


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (the reader's worker process too)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(next(x for x in status.splitlines() if x.startswith("VmRSS:")).split()[1]) * 1024
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total


def _run_once(run_dir: Path) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS GiB of the process tree, bytes of JSON) of one report."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "rlsight.cli", "report", str(run_dir), "--json"],
                                stdout=out, stderr=subprocess.PIPE)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], _tree_rss(proc.pid))
                done.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode() if proc.stderr else ""
        if proc.returncode != 0:
            raise SystemExit(f"rlsight report exited {proc.returncode}: {err}")
        size = out.tell()
    rss = max(peak[0], usage.ru_maxrss * 1024) / 2**30
    return wall, usage.ru_utime + usage.ru_stime, rss, size


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
    cpu = statistics.median(s[1] for s in samples)
    rss = max(s[2] for s in samples)
    ok = wall < TARGET_S and rss < TARGET_RSS_GIB
    load = os.getloadavg()[0]
    print(f"## rlsight report --json on {written} spans, 64 ranks ({size_mib:.0f} MiB of OTLP/JSON, "
          f"generated in {gen_s:.1f} s)")
    print(f"  end-to-end wall (median of {rounds})   {wall:8.2f} s      rounds: "
          + ", ".join(f"{s[0]:.2f}" for s in samples))
    print(f"  CPU, report + reader worker (median) {cpu:7.2f} s")
    print(f"  peak RSS, process tree (max)        {rss:8.2f} GiB")
    print(f"  throughput                          {written / wall / 1e3:8.0f} k spans/s")
    print(f"  JSON document                       {samples[0][3] / 2**10:8.0f} KiB")
    print(f"  target < {TARGET_S:.0f} s and < {TARGET_RSS_GIB:.0f} GiB        {'met' if ok else 'MISSED'}"
          f"   (load average {load:.1f} on {os.cpu_count()} cores)")
    if args.json:
        emit_json({"title": "rlsight report --json end to end", "spans": written, "wall_s": wall,
                   "cpu_s": cpu, "peak_rss_gib": rss, "spans_per_s": written / wall, "target_met": ok,
                   "load_average": load})


if __name__ == "__main__":
    main()
