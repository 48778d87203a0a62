"""`rlsight report --json` and `rlsight timeline` end to end on 1,000,000 spans across 64 ranks.

Targets (issue 16): `report --json` in <= 2 s wall and <= 1 GiB peak RSS, `timeline` in <= 5 s,
on the 2-core machine. Each round runs the installed CLI in a fresh process (imports, reading,
analysis, output); peak memory is the resident set of the whole process tree (the CLI and the
reader's worker process), sampled every 50 ms.

The run is written through the store's own span codec (``_synthetic_run``), so the readers
see the bytes a real run's writer leaves, key order included.

Two states are measured. *Cold*: the run as its writer left it, with no column cache (the
first read of a run; the cache folder is deleted before each cold round). The JSON files are
in the OS page cache either way (they were just written), so neither state measures a disk.
*Warm*: the column cache the first read wrote is there (every later read of the run). The
cold read is the honest headline. The machine is shared, so the load average is printed.
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

import shutil

from _harness import emit_json, parse_args
from _synthetic_run import write_synthetic_run

TARGET_S = 2.0
TARGET_RSS_GIB = 1.0
TARGET_TIMELINE_S = 5.0


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


def _run_once(run_dir: Path, *args: str, cold: bool) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS GiB of the process tree, bytes out) of one command."""
    if cold:
        shutil.rmtree(run_dir / ".rlsight-cache", ignore_errors=True)
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "rlsight.cli", *args],
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
            raise SystemExit(f"rlsight {args[0]} exited {proc.returncode}: {err}")
        size = out.tell()
    rss = max(peak[0], usage.ru_maxrss * 1024) / 2**30
    return wall, usage.ru_utime + usage.ru_stime, rss, size


def main() -> None:
    args = parse_args()
    spans, rounds = (100_000, 2) if args.quick else (1_000_000, 3)
    results: dict[str, list[tuple[float, float, float, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="rlsight-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        t0 = time.perf_counter()
        written = write_synthetic_run(run_dir, spans=spans, ranks=64)
        gen_s = time.perf_counter() - t0
        size_mib = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file()) / 2**20
        time.sleep(2.5)  # the column cache trusts a file's stat once it has settled (2 s)
        report = ("report", str(run_dir), "--json")
        timeline = ("timeline", str(run_dir), "-o", str(Path(tmp) / "trace.json"))
        # Installed packages have their bytecode (pip compiles it; a first run writes it). With
        # PYTHONDONTWRITEBYTECODE set, as here, no run would ever write it and every round
        # would compile the CLI's ~300 modules from source: one untimed run of each command
        # with bytecode writing on stands for the install.
        for command in (report, timeline):
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            subprocess.run([sys.executable, "-m", "rlsight.cli", *command], env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(rounds):  # cold and warm alternate, so load spikes hit both alike
            results.setdefault("report cold", []).append(_run_once(run_dir, *report, cold=True))
            results.setdefault("report warm", []).append(_run_once(run_dir, *report, cold=False))
        for _ in range(rounds):
            results.setdefault("timeline cold", []).append(_run_once(run_dir, *timeline, cold=True))
            results.setdefault("timeline warm", []).append(_run_once(run_dir, *timeline, cold=False))
    load = os.getloadavg()[0]
    print(f"## rlsight report --json / timeline on {written} spans, 64 ranks ({size_mib:.0f} MiB of "
          f"OTLP/JSON, generated in {gen_s:.1f} s); medians of {rounds} rounds, fresh process each")
    print(f"  {'':16}{'wall s':>8}{'CPU s':>8}{'peak GiB':>10}{'k spans/s':>11}   target")
    verdicts = {}
    for name, samples in results.items():
        wall = statistics.median(s[0] for s in samples)
        cpu = statistics.median(s[1] for s in samples)
        rss = max(s[2] for s in samples)
        if name.startswith("report"):
            ok = wall <= TARGET_S and rss <= TARGET_RSS_GIB
            target = f"<= {TARGET_S:.0f} s, <= {TARGET_RSS_GIB:.0f} GiB"
        else:
            ok = wall <= TARGET_TIMELINE_S
            target = f"<= {TARGET_TIMELINE_S:.0f} s"
        verdicts[name] = {"wall_s": wall, "cpu_s": cpu, "peak_rss_gib": rss, "target_met": ok}
        print(f"  {name:16}{wall:8.2f}{cpu:8.2f}{rss:10.2f}{written / wall / 1e3:11.0f}   {target}: "
              f"{'met' if ok else 'MISSED'}   (rounds: {', '.join(f'{s[0]:.2f}' for s in samples)})")
    print(f"  JSON document {results['report cold'][0][3] / 2**10:.0f} KiB; "
          f"load average {load:.1f} on {os.cpu_count()} cores")
    if args.json:
        emit_json({"title": "rlsight report --json and timeline end to end", "spans": written,
                   "results": verdicts, "load_average": load})


if __name__ == "__main__":
    main()
